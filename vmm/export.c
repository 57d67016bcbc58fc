/* libmoevm.so is moevm_core linked whole; vmm/libmoevm.map decides what it exports (the
 * public mvm_* API of include/moevm/moevm.h). A shared library needs one object of its own. */
#include "moevm/moevm.h"

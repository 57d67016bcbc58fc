/*
 * One weight type's kernels, a PTX module of their own: compiled once per type with
 * -DMVM_G_TYPE=<name> -DMVM_G_WTYPE=<enum> (CMakeLists.txt), each file below making only
 * that type's instances (kernels/cuda/kernels.h, MVM_G_TYPED_KERNELS). Their kernels of no
 * type are the modules of the files themselves, compiled with -DMVM_G_UNTYPED.
 *
 * Why apart: a model has two or three of the 23 types, and the driver compiles a module's
 * PTX whole for the GPU at its first load. All types in one module were 17 MB of PTX that
 * ptxas took 30 s over; one type's take about a second (docs/perf/engine.md, session 96),
 * loaded when the engine first launches a kernel of that type (engine/compute/gpu.c).
 */
#include "kernels/cuda/expert.cu"
#include "kernels/cuda/gemm.cu"
#include "kernels/cuda/matvec.cu"

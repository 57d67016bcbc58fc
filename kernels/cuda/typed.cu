/*
 * One weight type's kernels, a PTX module of their own: compiled once per type with
 * -DMVM_G_TYPE=<name> -DMVM_G_WTYPE=<enum> (f32's beside q8_0's: CMakeLists.txt says
 * why), each file below making only that type's instances (kernels/cuda/kernels.h,
 * MVM_G_TYPED_KERNELS). Their kernels of no type are the modules of the files themselves,
 * compiled with -DMVM_G_UNTYPED.
 *
 * Why apart: a model has two or three of the 23 types, and the driver compiles a module's
 * PTX whole for the GPU at its first load. All types in one module were 17 MB of PTX, most
 * of the 39 s ptxas took over every module; one type's take a second or two
 * (docs/perf/engine.md, session 96), loaded when the engine first launches a kernel of that
 * type (engine/compute/gpu.c).
 */
#include "kernels/cuda/expert.cu"
#include "kernels/cuda/gemm.cu"
#include "kernels/cuda/matvec.cu"

# Assembles every PTX module of the build for a real GPU (the CTest test ptxas_sm90):
#   cmake -DPTXAS=ptxas -DARCH=sm_90 -DDIR=build/gen [-DPDL=test_ptx_pdl] -P ptxas_check.cmake
# With PDL, each module as MOEVM_PDL loads it (PDL --write IN OUT: engine/compute/ptx_pdl.c),
# which is the module's code with its target sm_90 and two instructions at each kernel's
# start: the one run checks both.
# nvcc -ptx passes inline assembly through as text (kernels/cuda/mmq.cu's mma.sync); only
# ptxas, which the driver runs when it loads a module, says whether it is valid for the
# device. Without a GPU this is the check that the modules would load, and it prints each
# kernel that spills registers to local memory.
file(GLOB ptx "${DIR}/*.ptx")
if(NOT ptx)
  message(FATAL_ERROR "ptxas_check.cmake: no PTX in ${DIR}")
endif()
foreach(f ${ptx})
  if(PDL)
    get_filename_component(name ${f} NAME)
    set(patched ${CMAKE_CURRENT_BINARY_DIR}/pdl_${name})
    execute_process(COMMAND ${PDL} --write ${f} ${patched} RESULT_VARIABLE rc ERROR_VARIABLE log)
    if(rc)
      message(FATAL_ERROR "ptxas_check.cmake: ${PDL} --write ${f} failed:\n${log}")
    endif()
    set(f ${patched})
  endif()
  execute_process(COMMAND ${PTXAS} -arch=${ARCH} -v ${f} -o /dev/null
                  RESULT_VARIABLE rc ERROR_VARIABLE log OUTPUT_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "ptxas -arch=${ARCH} failed on ${f}:\n${log}")
  endif()
  if(PDL)
    file(REMOVE ${f})
  endif()
  string(REGEX MATCHALL "entry function '[^']+'[^\n]*\n[^\n]*\n[^\n]*stack frame, [1-9][0-9]* bytes spill stores" spills "${log}")
  foreach(s ${spills})
    string(REGEX MATCH "'[^']+'" name "${s}")
    message(STATUS "${name} spills registers (${ARCH})")
  endforeach()
endforeach()
list(LENGTH ptx n)
message(STATUS "${n} PTX modules assemble for ${ARCH}")

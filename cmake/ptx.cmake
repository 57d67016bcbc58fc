# Compiles SRC to PTX in OUT, or copies it from CACHE when the same inputs were compiled
# before (the sanitizer builds of `make test` reuse the plain build's: PTX does not depend
# on sanitizers; the three builds took 227 s instead of 270 on two cores, docs/perf/tests.md):
#   cmake -DNVCC=nvcc -DSRC=k.cu -DDEPS="a.h|b.h" -DINC=dir -DOUT=k.ptx [-DARCH=compute_NN]
#         [-DDEFS="-DA|-DB=1"] [-DCACHE=dir] -P ptx.cmake
# The cache key is the SHA-256 of the source, its headers, nvcc's version and the flags, so
# an entry never stands for other inputs.
if(NOT ARCH)
  set(ARCH compute_75)
endif()
string(REPLACE "|" ";" defs "${DEFS}")
set(flags -ptx -arch=${ARCH} -I${INC} ${defs})
execute_process(COMMAND ${NVCC} --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "ptx.cmake: ${NVCC} --version failed")
endif()
set(key "${version}${flags}")
string(REPLACE "|" ";" deps "${DEPS}")
foreach(f ${SRC} ${deps})
  file(SHA256 "${f}" h)
  string(APPEND key "${f}:${h};")
endforeach()
string(SHA256 key "${key}")
if(CACHE AND EXISTS "${CACHE}/${key}.ptx")
  configure_file("${CACHE}/${key}.ptx" "${OUT}" COPYONLY)
  return()
endif()
execute_process(COMMAND ${NVCC} ${flags} ${SRC} -o ${OUT} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "ptx.cmake: nvcc failed on ${SRC}")
endif()
if(CACHE)
  file(MAKE_DIRECTORY "${CACHE}")
  # Written under a temporary name, then renamed: builds running at once never read half.
  configure_file("${OUT}" "${CACHE}/${key}.ptx.tmp" COPYONLY)
  file(RENAME "${CACHE}/${key}.ptx.tmp" "${CACHE}/${key}.ptx")
endif()

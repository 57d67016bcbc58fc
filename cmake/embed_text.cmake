# Writes the text file IN into OUT as a C string constant NAME:
#   cmake -DIN=kernel.ptx -DOUT=kernel_ptx.h -DNAME=kernel_ptx -P embed_text.cmake
# (a header, not a resource: the library must carry the kernel, and C11 has no #embed).
file(READ "${IN}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed_text.cmake. */\n"
                    "static const char ${NAME}[] =\n    \"${text}\";\n")

# Writes a header OUT that carries the file IN as the NUL-terminated char array NAME,
# its bytes put there by the assembler's .incbin:
#   cmake -DIN=/abs/kernel.ptx -DOUT=kernel_ptx.h -DNAME=kernel_ptx -P embed_incbin.cmake
# Why not a string literal (embed_text.cmake): gcc took 37 s over gpu.c's 16 MB of PTX as
# literals, in each of `make test`'s three builds; the assembler copies them in no time.
# The header names IN's SHA-256, so that it changes, and its includer is compiled again,
# whenever IN does. One translation unit includes it (the symbol is defined there).
file(SHA256 "${IN}" hash)
file(WRITE "${OUT}" "/* Generated from ${IN} (sha256 ${hash}) by cmake/embed_incbin.cmake. */
#ifndef ${NAME}_H
#define ${NAME}_H
__asm__(\".pushsection .rodata\\n\"
        \".balign 64\\n\"
        \".globl ${NAME}\\n\"
        \".hidden ${NAME}\\n\"
        \".type ${NAME}, %object\\n\"
        \"${NAME}:\\n\"
        \".incbin \\\"${IN}\\\"\\n\"
        \".byte 0\\n\"
        \".size ${NAME}, . - ${NAME}\\n\"
        \".popsection\\n\");
extern const char ${NAME}[] __attribute__((visibility(\"hidden\")));
#endif
")

/*
 * GPT-2's byte-level alphabet (bytes_to_unicode): every byte has a printable symbol, so that
 * byte-level BPE vocabularies can spell any byte string as text.
 */
#include "engine/tokenizer/tokenizer_impl.h"

/* Bytes that are printable and not a space stand for themselves; the other 68 take the
 * code points from U+0100 in byte order. */
static int is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

size_t tok_byte_symbol(uint8_t b, char out[2])
{
    unsigned cp;
    if (is_printable(b))
        cp = b;
    else if (b <= 0x20)
        cp = 0x100 + b;
    else if (b < 0xAD)
        cp = 0x100 + 33 + (b - 0x7Fu);
    else
        cp = 0x100 + 67;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_symbol_byte(uint32_t cp)
{
    if (cp < 0x100)
        return is_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33)
        return (int)(cp - 0x100);
    if (cp < 0x100 + 67)
        return (int)(cp - 0x100 - 33 + 0x7F);
    return cp == 0x100 + 67 ? 0xAD : -1;
}

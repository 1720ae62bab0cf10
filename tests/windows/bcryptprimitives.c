/* A stand-in for Windows' bcryptprimitives.dll, which Debian's Wine 8.0 lacks: Rust's standard
 * library imports ProcessPrng from it, so every Rust .exe dies at load under that Wine without
 * it. Real Windows (8 and later) ships the DLL; this file is only for the Wine test suite
 * (tests/windows.rs), built with mingw-w64 into the test's Wine prefix. */
#include <windows.h>
#include <bcrypt.h>

/* Fills `data` with `len` random bytes from the system's preferred generator. */
BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!BCRYPT_SUCCESS(BCryptGenRandom(NULL, data, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG)))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}

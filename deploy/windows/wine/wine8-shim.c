/* Wine 8's quirks, met in the test harness only: built with mingw-w64 as
 * bcryptprimitives.dll and put in the Wine prefix's system32 by
 * deploy/windows/wine.sh. Nothing shipped contains or needs it; on Windows
 *10 and later the real bcryptprimitives.dll is there and the sockets
 * answer as quinn-udp expects.
 *
 * 1. Wine 8 has no bcryptprimitives.dll, and Rust's std (since 1.78) takes
 *    its random numbers from its ProcessPrng: a Rust program exits silently
 *    at start. ProcessPrng here forwards to RtlGenRandom (advapi32's
 *    SystemFunction036), which Wine has.
 * 2. Wine 8's sockets refuse two queries quinn-udp makes of every UDP
 *    socket, which Windows answers: IPV6_V6ONLY asked of an AF_INET socket
 *    (WSAEOPNOTSUPP) and IP_RECVECN / IPV6_RECVECN (WSAENOPROTOOPT). Since
 *    std loads this DLL before the program runs, its DllMain points the
 *    program's imports of getsockopt and setsockopt at wrappers that answer
 *    those as Windows does (not v6-only; ECN asked for, none reported) and
 *    pass everything else through unchanged. */
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <string.h>

#ifndef IP_RECVECN
#define IP_RECVECN 50
#endif
#ifndef IPV6_RECVECN
#define IPV6_RECVECN 50
#endif

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}

typedef int (WSAAPI *sockopt_get)(SOCKET, int, int, char *, int *);
typedef int (WSAAPI *sockopt_set)(SOCKET, int, int, const char *, int);
static sockopt_get real_get;
static sockopt_set real_set;

static int WSAAPI shim_getsockopt(SOCKET s, int level, int name, char *value, int *len)
{
    /* Wine may change *len even when it refuses the query. */
    int room = len ? *len : 0;
    int rc = real_get(s, level, name, value, len);
    if (rc != 0 && level == IPPROTO_IPV6 && name == IPV6_V6ONLY
        && WSAGetLastError() == WSAEOPNOTSUPP && value && room >= (int)sizeof(DWORD)) {
        *(DWORD *)value = 0;
        *len = sizeof(DWORD);
        return 0;
    }
    return rc;
}

static int WSAAPI shim_setsockopt(SOCKET s, int level, int name, const char *value, int len)
{
    int rc = real_set(s, level, name, value, len);
    if (rc != 0 && WSAGetLastError() == WSAENOPROTOOPT
        && ((level == IPPROTO_IP && name == IP_RECVECN)
            || (level == IPPROTO_IPV6 && name == IPV6_RECVECN)))
        return 0;
    return rc;
}

/* Point every import of ws2_32's getsockopt and setsockopt in the program
 * (every import descriptor naming ws2_32.dll) at the wrappers. */
static void patch_program_imports(void)
{
    BYTE *base = (BYTE *)GetModuleHandleW(NULL);
    IMAGE_DOS_HEADER *dos = (IMAGE_DOS_HEADER *)base;
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + dos->e_lfanew);
    IMAGE_DATA_DIRECTORY dir = nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    if (!dir.VirtualAddress)
        return;
    for (IMAGE_IMPORT_DESCRIPTOR *d = (IMAGE_IMPORT_DESCRIPTOR *)(base + dir.VirtualAddress);
         d->Name; d++) {
        if (_stricmp((const char *)(base + d->Name), "ws2_32.dll") != 0 || !d->OriginalFirstThunk)
            continue;
        IMAGE_THUNK_DATA *names = (IMAGE_THUNK_DATA *)(base + d->OriginalFirstThunk);
        IMAGE_THUNK_DATA *slots = (IMAGE_THUNK_DATA *)(base + d->FirstThunk);
        for (; names->u1.AddressOfData; names++, slots++) {
            if (IMAGE_SNAP_BY_ORDINAL(names->u1.Ordinal))
                continue;
            const char *fn = (const char *)((IMAGE_IMPORT_BY_NAME *)(base + names->u1.AddressOfData))->Name;
            ULONG_PTR to;
            if (strcmp(fn, "getsockopt") == 0)
                to = (ULONG_PTR)shim_getsockopt;
            else if (strcmp(fn, "setsockopt") == 0)
                to = (ULONG_PTR)shim_setsockopt;
            else
                continue;
            DWORD old;
            if (VirtualProtect(&slots->u1.Function, sizeof(ULONG_PTR), PAGE_READWRITE, &old)) {
                slots->u1.Function = to;
                VirtualProtect(&slots->u1.Function, sizeof(ULONG_PTR), old, &old);
            }
        }
    }
}

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
    (void)instance;
    (void)reserved;
    if (reason == DLL_PROCESS_ATTACH) {
        HMODULE ws2 = LoadLibraryW(L"ws2_32.dll");
        if (ws2) {
            real_get = (sockopt_get)(void *)GetProcAddress(ws2, "getsockopt");
            real_set = (sockopt_set)(void *)GetProcAddress(ws2, "setsockopt");
            if (real_get && real_set)
                patch_program_imports();
        }
    }
    return TRUE;
}

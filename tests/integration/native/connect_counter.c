/* LD_PRELOAD shim: counts a process's connect() calls to one TCP port, whatever the client
 * library (Python's socket module, libuv, librdkafka, the JVM all call libc's connect).
 * KQP_COUNT_PORT names the port; each call appends one byte to KQP_COUNT_FILE, so the
 * file's size is the count, even across threads and a process killed at the end. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect;
    if (!real_connect) real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    const char *port = getenv("KQP_COUNT_PORT");
    const char *path = getenv("KQP_COUNT_FILE");
    if (port && path && addr) {
        int seen = -1;
        if (addr->sa_family == AF_INET)
            seen = ntohs(((const struct sockaddr_in *)addr)->sin_port);
        else if (addr->sa_family == AF_INET6)
            seen = ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
        if (seen == atoi(port)) {
            int out = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
            if (out >= 0) {
                (void)write(out, "c", 1);
                close(out);
            }
        }
    }
    return real_connect(fd, addr, len);
}

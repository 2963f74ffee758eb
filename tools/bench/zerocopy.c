/*
 * Does sending without a copy pay on loopback? (issue 15; results in
 * docs/serving-cost.md, "Sending without a copy").
 *
 * One thread sends CHUNK-byte rounds (a 450 kbit/s stream's second) round
 * robin over NS loopback TCP connections, which a second thread drains; every
 * SHARE-th round is first read with O_DIRECT from DATA into the send buffer
 * (SHARE = how many streams send each device read, as with rondo's shared
 * reads). The figure is the sending thread's own CPU time (which on loopback
 * also covers the kernel's delivery into the receiving socket) per GB sent.
 *
 * Modes: 0 write() from an anonymous buffer (what rondo does);
 *        1 sendfile() from a memfd buffer, the range punched out before each
 *          read, so that pages the kernel still holds are never rewritten;
 *        2 sendfile() from a memfd, the buffer rewritten in place (unsafe: a
 *          receiver that has not read yet would see the new bytes);
 *        3 vmsplice() + splice() through a pipe per connection, the buffer
 *          dropped with MADV_DONTNEED before each read (safe);
 *        4 as 3 without MADV_DONTNEED (unsafe, as 2).
 * Usage: zerocopy MODE SHARE MEGABYTES DATA (DATA: a file of >= 64 MiB).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define NS 64
#define CHUNK (56 * 1024)
static int cli[NS], srv[NS];
static volatile int stop;

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *reader(void *unused) {
    (void)unused;
    char *b = malloc(1 << 20);
    struct pollfd p[NS];
    for (int i = 0; i < NS; i++) {
        p[i].fd = cli[i];
        p[i].events = POLLIN;
    }
    while (!stop) {
        poll(p, NS, 100);
        for (int i = 0; i < NS; i++)
            if (p[i].revents & POLLIN)
                while (read(cli[i], b, 1 << 20) > 0) {
                }
    }
    return 0;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

int main(int argc, char **argv) {
    static const char *names[] = {"write", "memfd sendfile, punched", "memfd sendfile (unsafe)",
                                  "vmsplice, MADV_DONTNEED", "vmsplice (unsafe)"};
    if (argc != 5) {
        fprintf(stderr, "usage: zerocopy MODE(0-4) SHARE MEGABYTES DATA\n");
        return 2;
    }
    int mode = atoi(argv[1]), share = atoi(argv[2]);
    long megabytes = atol(argv[3]);
    if (mode < 0 || mode > 4 || share < 1 || megabytes < 1) {
        fprintf(stderr, "bad MODE, SHARE or MEGABYTES\n");
        return 2;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t al = sizeof a;
    if (bind(ls, (void *)&a, sizeof a) || listen(ls, NS) || getsockname(ls, (void *)&a, &al))
        die("listen");
    for (int i = 0; i < NS; i++) {
        cli[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(cli[i], (void *)&a, sizeof a)) die("connect");
        srv[i] = accept(ls, 0, 0);
        fcntl(cli[i], F_SETFL, O_NONBLOCK);
    }
    pthread_t th;
    pthread_create(&th, 0, reader, 0);
    int fd = open(argv[4], O_RDONLY | O_DIRECT);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) die("open DATA");
    int pipes[NS][2];
    if (mode >= 3)
        for (int i = 0; i < NS; i++) {
            if (pipe(pipes[i])) die("pipe");
            fcntl(pipes[i][1], F_SETPIPE_SZ, 1 << 20);
        }
    int mfd = memfd_create("buffers", 0);
    if (mfd < 0 || ftruncate(mfd, CHUNK)) die("memfd");
    char *buf = (mode == 1 || mode == 2)
                    ? mmap(0, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0)
                    : mmap(0, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) die("mmap");
    long sends = megabytes * 1000 * 1000 / CHUNK;
    off_t data_off = 0;
    double cpu0 = thread_cpu_s();
    for (long s = 0; s < sends; s++) {
        if (s % share == 0) {
            if (mode == 1 && fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, CHUNK))
                die("fallocate");
            if (mode == 3 && madvise(buf, CHUNK, MADV_DONTNEED)) die("madvise");
            if (pread(fd, buf, CHUNK, data_off) != CHUNK) die("pread");
            data_off += CHUNK;
            if (data_off + CHUNK > st.st_size) data_off = 0;
        }
        int i = s % NS;
        long left = CHUNK;
        while (left > 0) {
            long n;
            if (mode == 0) {
                n = write(srv[i], buf + CHUNK - left, left);
            } else if (mode >= 3) {
                struct iovec v = {buf + CHUNK - left, left};
                long m = vmsplice(pipes[i][1], &v, 1, 0);
                if (m < 0) die("vmsplice");
                n = splice(pipes[i][0], 0, srv[i], 0, m, SPLICE_F_MOVE);
                if (n != m) die("splice");
            } else {
                off_t o = CHUNK - left;
                n = sendfile(srv[i], mfd, &o, left);
            }
            if (n < 0) die("send");
            left -= n;
        }
    }
    double cpu_s = thread_cpu_s() - cpu0;
    stop = 1;
    pthread_join(th, 0);
    printf("%d\t%s\t%d\t%.3f\n", mode, names[mode], share, cpu_s / (megabytes / 1000.0));
    return 0;
}

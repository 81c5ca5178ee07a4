/* A link with a one-way delay, for kernels built without sch_netem: two TAP devices joined by this process.
 *
 *     taprelay OUTER INNER DELAY_US
 *
 * Creates the TAP devices OUTER and INNER (the harness then puts INNER in a host's namespace and OUTER on the
 * bridge, where a veth pair would be) and copies Ethernet frames between them: what the host sends (read from
 * INNER) goes out on OUTER at once, what the host receives (read from OUTER) reaches INNER DELAY_US later, so a
 * round trip to the host gains the delay once, as a netem qdisc on the outer end would add it. Frames keep their
 * order; when more than MAX_QUEUED wait, new ones are dropped, as a full queue would drop them.
 *
 * Prints "ready" once both devices exist. A line on stdin holding a number sets a new delay (microseconds) for
 * the frames read from then on; end of stdin, SIGTERM or the parent's death ends it, and the devices go with it
 * (they are not persistent).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX 65536 /* a TAP device without offloads hands out frames of MTU + header; room for any MTU */
#define SLOT 2048        /* frames up to this size are queued in place; larger ones are allocated */
#define MAX_QUEUED 32768 /* 1 Gbit/s of 1,514-byte frames for 390 ms */

struct queued {
    uint64_t due_ns;
    uint32_t length;
    unsigned char *data;
};

static volatile sig_atomic_t stopping = 0;

static void on_signal(int signum) {
    (void)signum;
    stopping = 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int open_tap(const char *name) {
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        perror("taprelay: /dev/net/tun");
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    if (strlen(name) >= IFNAMSIZ) {
        fprintf(stderr, "taprelay: device name %s is too long\n", name);
        return -1;
    }
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        fprintf(stderr, "taprelay: cannot create TAP device %s: %s\n", name, strerror(errno));
        return -1;
    }
    return fd;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: taprelay OUTER INNER DELAY_US\n");
        return 2;
    }
    char *end = NULL;
    long long delay_us = strtoll(argv[3], &end, 10);
    if (*argv[3] == '\0' || *end != '\0' || delay_us < 0 || delay_us > 10000000) {
        fprintf(stderr, "taprelay: DELAY_US must be 0..10000000, not %s\n", argv[3]);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    signal(SIGPIPE, SIG_IGN);

    int outer = open_tap(argv[1]);
    int inner = outer < 0 ? -1 : open_tap(argv[2]);
    if (outer < 0 || inner < 0)
        return 1;
    struct queued *queue = calloc(MAX_QUEUED, sizeof *queue);
    unsigned char *slots = malloc((size_t)MAX_QUEUED * SLOT);
    unsigned char *frame = malloc(FRAME_MAX);
    if (queue == NULL || slots == NULL || frame == NULL) {
        fprintf(stderr, "taprelay: out of memory\n");
        return 1;
    }
    size_t head = 0, count = 0;
    uint64_t dropped = 0;
    char control[64];
    size_t control_len = 0;
    int control_open = 1;
    printf("ready\n");
    fflush(stdout);

    while (!stopping) {
        uint64_t now = now_ns();
        while (count > 0 && queue[head].due_ns <= now) { /* what is due, in order */
            struct queued *q = &queue[head];
            if (write(inner, q->data, q->length) < 0 && errno != EAGAIN && errno != EIO)
                perror("taprelay: write");
            if (q->data != slots + head * SLOT)
                free(q->data);
            head = (head + 1) % MAX_QUEUED;
            count--;
        }
        struct pollfd fds[3] = {{inner, POLLIN, 0}, {outer, POLLIN, 0}, {control_open ? 0 : -1, POLLIN, 0}};
        struct timespec wait, *timeout = NULL;
        if (count > 0) {
            uint64_t left = queue[head].due_ns > now ? queue[head].due_ns - now : 0;
            wait.tv_sec = (time_t)(left / 1000000000u);
            wait.tv_nsec = (long)(left % 1000000000u);
            timeout = &wait;
        }
        if (ppoll(fds, 3, timeout, NULL) < 0) {
            if (errno == EINTR)
                continue;
            perror("taprelay: ppoll");
            return 1;
        }
        if (fds[0].revents & POLLIN) { /* sent by the host: out at once */
            for (;;) {
                ssize_t n = read(inner, frame, FRAME_MAX);
                if (n <= 0)
                    break;
                if (write(outer, frame, (size_t)n) < 0 && errno != EAGAIN && errno != EIO)
                    perror("taprelay: write");
            }
        }
        if (fds[1].revents & POLLIN) { /* for the host: after the delay */
            for (;;) {
                ssize_t n = read(outer, frame, FRAME_MAX);
                if (n <= 0)
                    break;
                if (count == MAX_QUEUED) {
                    dropped++;
                    continue;
                }
                size_t at = (head + count) % MAX_QUEUED;
                struct queued *q = &queue[at];
                q->data = n <= SLOT ? slots + at * SLOT : malloc((size_t)n);
                if (q->data == NULL) {
                    dropped++;
                    continue;
                }
                memcpy(q->data, frame, (size_t)n);
                q->length = (uint32_t)n;
                q->due_ns = now_ns() + (uint64_t)delay_us * 1000u;
                count++;
            }
        }
        if (fds[2].revents & (POLLIN | POLLHUP)) {
            ssize_t n = read(0, control + control_len, sizeof control - 1 - control_len);
            if (n <= 0) {
                control_open = 0;
                break; /* the harness is gone */
            }
            control_len += (size_t)n;
            control[control_len] = '\0';
            char *newline;
            while ((newline = strchr(control, '\n')) != NULL) {
                *newline = '\0';
                long long value = strtoll(control, &end, 10);
                if (*control != '\0' && *end == '\0' && value >= 0 && value <= 10000000)
                    delay_us = value;
                else
                    fprintf(stderr, "taprelay: ignored delay %s\n", control);
                size_t rest = control_len - (size_t)(newline + 1 - control);
                memmove(control, newline + 1, rest);
                control_len = rest;
                control[control_len] = '\0';
            }
            if (control_len == sizeof control - 1)
                control_len = 0; /* a line too long to be a number */
        }
    }
    if (dropped)
        fprintf(stderr, "taprelay: %llu frames dropped (queue full)\n", (unsigned long long)dropped);
    return 0;
}

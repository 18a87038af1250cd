/* The sandbox's pause process for the GPU node lane's pod image (no registry there):
 * sleeps until SIGTERM/SIGINT, reaps children (it is PID 1 of the pod's PID namespace). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }
static void on_chld(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction term = {0}, chld = {0};
    term.sa_handler = on_term;
    chld.sa_handler = on_chld;
    chld.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGCHLD, &chld, NULL);
    for (;;) pause();
    return 0;
}

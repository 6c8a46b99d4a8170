/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * Like the upstream Kubernetes pause container: it does nothing but wait, so the
 * network and IPC namespaces it owns outlive the pod's app containers. It exits 0 on
 * SIGINT or SIGTERM (so stopping the sandbox is quick and clean), and it reaps any
 * zombie children on SIGCHLD, because as PID 1 of a shared PID namespace it inherits
 * orphans that nobody else would wait for.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_terminate(int sig) {
	(void)sig;
	/* _exit is async-signal-safe; exit() is not. */
	_exit(0);
}

static void on_child(int sig) {
	(void)sig;
	int saved = errno;
	/* Reap every child that has exited; more than one may be pending per signal. */
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
	errno = saved;
}

static void install(int sig, void (*handler)(int), int flags) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) < 0) {
		perror("pause: sigaction");
		exit(1);
	}
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		printf("pause (rkubelet) 3.10\n");
		return 0;
	}
	if (getpid() != 1) {
		/* Upstream warns too: outside a PID namespace we will not reap orphans. */
		fprintf(stderr, "pause: warning: not running as PID 1\n");
	}
	install(SIGINT, on_terminate, 0);
	install(SIGTERM, on_terminate, 0);
	install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART);
	for (;;) {
		pause();
	}
	/* Not reached. */
	return 42;
}

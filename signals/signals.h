/*
 * signals.h: how a process of pipetrain ends on a signal (signals.c). The
 * handlers reach only their own globals, the node's cache names
 * (cache/cache.h) and the temporary files of outputs being written
 * (formats/formats.h).
 */
#ifndef PT_SIGNALS_H
#define PT_SIGNALS_H

#include <sys/types.h>

/* From now on SIGINT, SIGTERM and SIGUSR1 (and SIGHUP and SIGXCPU unless
 * ignored) ask the training loop to finish the step, save and stop (a
 * second one exits at once). Called before the session is built, so a
 * signal during setup is not fatal either. */
void pt_catch_stop_signals(void);
/* The first stop signal received (its number), 0 while none has come. */
int pt_stop_signal_pending(void);
/* SIGBUS (a mapped file cut short) ends the process with a message and
 * status 1, not a core dump: every command's, from main on; train's
 * message (pt_catch_stop_signals) also says how to resume. */
void pt_catch_bus_error(void);
/* The launcher's process (a rank's parent under mpirun), whose death
 * SIGTERMs the rank as many times as it has threads: after the first,
 * SIGTERMs from it are no second stop request. */
void pt_stop_signals_launcher(pid_t pid);
/* Where the signal handler reads what to print ("signal received while at
 * ..."): the engine keeps it up to date. */
const char *volatile *pt_stop_signal_where(void);
/* eval, plan and export: a signal whose default action ends the process
 * still does, after the clean-up (deferred while outputs go into place as
 * a group). */
void pt_catch_end_signals(void);

#endif

/*
 * fork() while another thread is inside a call on a handle (tests/fork.rs; docs/C_ABI.md, issue 30
 * item 18): the child's calls on the parent's handles fail at once with GM_ERR_FORKED (before,
 * the first one waited forever for a lock held by a thread that does not exist in the child),
 * handles made in the child work, the parent's _free in the child leaves them alone, and the
 * parent goes on.
 *
 *   fork LEDGER RECORDING
 *
 * Talks with the test on standard input and output: prints "ready" once the bank is open,
 * waits for a line (the test then holds the ledger's write lock from another process, so a
 * grant waits inside the bank's lock), starts a thread whose grant waits there, forks, and
 * prints "child: ok" (or what went wrong); the test then releases the ledger, and the program
 * prints the grant's status, its own checks and "ok".
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpumeter.h"

static gm_bank *bank;
static gm_status grant_status = 0xffff;

static void *grant(void *arg) {
    char *json = NULL;
    (void)arg;
    grant_status = gm_bank_grant_json(bank,
                                      "{\"tenant\": \"acme\", \"credits\": \"5\", \"rate\": \"1\", "
                                      "\"key\": \"fork\", \"at_ns\": 1700000000000000000}",
                                      &json);
    gm_string_free(json);
    return NULL;
}

/* In the child: `status` is GM_ERR_FORKED and the message says fork(). */
static int forked(gm_status status, const char *what) {
    char msg[1024];
    if (status != GM_ERR_FORKED) {
        fprintf(stderr, "child: %s: status %" PRIu32 ", not GM_ERR_FORKED\n", what, status);
        return 0;
    }
    gm_last_error_message(msg, sizeof msg);
    if (strstr(msg, "fork()") == NULL) {
        fprintf(stderr, "child: %s: message %s\n", what, msg);
        return 0;
    }
    return 1;
}

/* The child's checks; its exit status is the number of failures. */
static int child(gm_meter *meter, gm_recording *rec) {
    int failures = 0;
    char *out = NULL;
    uint64_t w = 7;
    gm_recording_item item;
    gm_meter *mine = NULL;

    /* A hang is a failure the parent sees as a signal. */
    alarm(20);
    /* The bank's lock is held by the grant thread, which did not fork. */
    failures += !forked(gm_bank_balance_json(bank, "acme", 0, &out), "gm_bank_balance_json");
    failures += out != NULL;
    failures += !forked(gm_bank_verify_json(bank, &out), "gm_bank_verify_json");
    failures += !forked(gm_meter_watermark_ns(meter, &w), "gm_meter_watermark_ns");
    failures += w != 7;
    failures += !forked(gm_meter_ingest_cupti_buffer(meter, NULL, 0), "gm_meter_ingest");
    failures += !forked(gm_meter_usage_json(meter, &out), "gm_meter_usage_json");
    memset(&item, 0, sizeof item);
    item.struct_size = sizeof item;
    failures += !forked(gm_recording_next(rec, &item), "gm_recording_next");
    failures += gm_recording_cupti_api_version(rec) != 0;
    /* A meter made here works. */
    if (gm_meter_new(NULL, &mine) != GM_OK || gm_meter_usage_json(mine, &out) != GM_OK) {
        fputs("child: a meter made in the child does not work\n", stderr);
        failures++;
    }
    gm_string_free(out);
    gm_meter_free(mine);
    /* The parent's handles: left alone (no lock, no close of the parent's connection). */
    gm_bank_free(bank);
    gm_meter_free(meter);
    gm_recording_free(rec);
    return failures;
}

int main(int argc, char **argv) {
    gm_meter *meter = NULL;
    gm_recording *rec = NULL;
    pthread_t thread;
    struct timespec pause = {0, 300 * 1000 * 1000};
    char line[64], *json = NULL;
    uint64_t w = 0;
    pid_t pid;
    int status = 0, rc = 1;

    if (argc != 3) {
        fputs("usage: fork LEDGER RECORDING\n", stderr);
        return 2;
    }
    if (gm_bank_open(argv[1], &bank) != GM_OK || gm_meter_new(NULL, &meter) != GM_OK ||
        gm_recording_open(argv[2], 0, &rec) != GM_OK) {
        gm_last_error_message(line, sizeof line);
        fprintf(stderr, "fork: cannot make the handles: %s\n", line);
        return 1;
    }
    puts("ready");
    fflush(stdout);
    if (fgets(line, sizeof line, stdin) == NULL) {
        return 1;
    }
    /* The grant waits inside the bank's lock for the ledger the test holds. */
    if (pthread_create(&thread, NULL, grant, NULL) != 0) {
        return 1;
    }
    nanosleep(&pause, NULL);
    fflush(stdout);
    pid = fork();
    if (pid < 0) {
        return 1;
    }
    if (pid == 0) {
        _exit(child(meter, rec));
    }
    if (waitpid(pid, &status, 0) != pid) {
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        puts("child: ok");
    } else if (WIFSIGNALED(status)) {
        printf("child: killed by signal %d (hung)\n", WTERMSIG(status));
    } else {
        printf("child: %d failures\n", WEXITSTATUS(status));
    }
    fflush(stdout);
    /* The test releases the ledger: the grant goes through, in the parent. */
    pthread_join(thread, NULL);
    printf("grant: %" PRIu32 "\n", grant_status);
    if (grant_status == GM_OK && gm_bank_balance_json(bank, "acme", 0, &json) == GM_OK &&
        strstr(json, "\"remaining\":\"5\"") != NULL && gm_meter_watermark_ns(meter, &w) == GM_OK &&
        gm_recording_cupti_api_version(rec) != 0) {
        printf("balance %s\nok\n", json);
        rc = 0;
    }
    gm_string_free(json);
    gm_recording_free(rec);
    gm_meter_free(meter);
    gm_bank_free(bank);
    return rc;
}

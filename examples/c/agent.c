/*
 * A gpumeter node agent in C (examples/README.md, "Agents").
 *
 * It replays a CUPTI recording (a .gmr, or a raw activity buffer file) through
 * libgpumeter_ffi exactly as a live CUPTI subscription would drive it: every completed
 * activity buffer goes to the hot path (gm_meter_ingest_cupti_buffer) one by one, and
 * whenever the meter's watermark passes a window edge the windows closed before it are
 * drained. Each drained usage report is printed to stdout as the library wrote it, followed
 * by its invoice (gm_rate_json); a real agent would ship the report to the billing service
 * instead. At the end everything left is drained.
 *
 *   scripts/build-c-abi
 *   gcc -std=c11 -Wall -Wextra -Werror -Ibindings/c examples/c/agent.c \
 *       -Ltarget/debug/c-abi/lib -Wl,-rpath,$PWD/target/debug/c-abi/lib -lgpumeter_ffi -o agent
 *   ./agent examples/data/h200-cuda13-smoke.gmr
 *
 * In an agent with a live subscription, the BUFFER case below is the body of CUPTI's
 * buffer-completed callback, DROPPED follows cuptiActivityGetNumDroppedRecords, and DEVICE
 * comes from the agent's own inventory (NVML or cudaGetDeviceProperties).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumeter.h"

static const char *usage_text =
    "usage: agent [--window-seconds N] [--reorder-horizon-ns N] [--tenant NAME]\n"
    "             [--prices BOOK.toml] [--raw-cupti-api-version N] RECORDING\n";

/* Prints the failed call and this thread's last error message; returns 0 when status is
 * GM_OK, else 1 (so that `if (failed(...)) goto out;` reads naturally). */
static int failed(gm_status status, const char *what) {
    char msg[1024];
    if (status == GM_OK) {
        return 0;
    }
    gm_last_error_message(msg, sizeof msg);
    fprintf(stderr, "agent: %s: status %" PRIu32 ": %s\n", what, status, msg);
    return 1;
}

/* Reads a whole file as a NUL-terminated string (the price book); NULL on failure. */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0, n;
    if (f == NULL) {
        fprintf(stderr, "agent: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    do {
        if (cap - len < 4096) {
            char *bigger = realloc(text, cap = cap * 2 + 4096);
            if (bigger == NULL) {
                free(text);
                fclose(f);
                return NULL;
            }
            text = bigger;
        }
        n = fread(text + len, 1, cap - len - 1, f);
        len += n;
    } while (n > 0);
    text[len] = '\0';
    if (ferror(f)) {
        fprintf(stderr, "agent: %s: read error\n", path);
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

/* Appends `s` to the string in `out` (`cap` bytes) with JSON's escapes, for a string literal. */
static void json_string(char *out, size_t cap, const char *s) {
    size_t n = strlen(out);
    for (; *s != '\0' && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            n += (size_t)snprintf(out + n, cap - n, "\\%c", c);
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
            out[n] = '\0';
        }
    }
}

/* Parses a decimal unsigned integer flag value; exits on garbage. */
static unsigned long long number(const char *flag, const char *text) {
    char *end = NULL;
    unsigned long long v;
    /* Decimal digits only, as the Go and Python agents take: strtoull alone also skips
     * leading spaces and takes a sign (" -1" wraps to 2^64 - 1). */
    if (text[0] == '\0' || strspn(text, "0123456789") != strlen(text)) {
        fprintf(stderr, "agent: %s: not a number: %s\n", flag, text);
        exit(2);
    }
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        fprintf(stderr, "agent: %s: not a number: %s\n", flag, text);
        exit(2);
    }
    return v;
}

/* Drains the windows that end at or before `before_ns` and prints the usage report, then
 * its invoice. Returns 0 on success. */
static int drain(gm_meter *meter, uint64_t before_ns, const char *prices) {
    char *usage = NULL, *invoice = NULL;
    int rc = 1;
    if (failed(gm_meter_drain_usage_json(meter, before_ns, &usage), "gm_meter_drain_usage_json")) {
        return 1;
    }
    if (failed(gm_rate_json(usage, prices, &invoice), "gm_rate_json")) {
        goto out;
    }
    printf("%s\n%s\n", usage, invoice);
    fflush(stdout);
    rc = 0;
out:
    /* Strings the library returns are freed by the library. */
    gm_string_free(invoice);
    gm_string_free(usage);
    return rc;
}

int main(int argc, char **argv) {
    unsigned long long window_seconds = 3600, horizon_ns = 0, raw_api = 0;
    int have_horizon = 0;
    const char *tenant = NULL, *prices_path = "examples/pricebook.toml", *path = NULL;
    char config[1024], *prices = NULL;
    gm_recording *rec = NULL;
    gm_meter *meter = NULL;
    gm_recording_item item;
    uint64_t window_ns, drained_edge = 0;
    int rc = 1, i;

    for (i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (argv[i][0] != '-' && path == NULL) {
            path = argv[i];
            continue;
        }
        if (value == NULL) {
            fputs(usage_text, stderr);
            return 2;
        }
        if (strcmp(argv[i], "--window-seconds") == 0) {
            window_seconds = number(argv[i], value);
        } else if (strcmp(argv[i], "--reorder-horizon-ns") == 0) {
            horizon_ns = number(argv[i], value);
            have_horizon = 1;
        } else if (strcmp(argv[i], "--tenant") == 0) {
            tenant = value;
        } else if (strcmp(argv[i], "--prices") == 0) {
            prices_path = value;
        } else if (strcmp(argv[i], "--raw-cupti-api-version") == 0) {
            raw_api = number(argv[i], value);
        } else {
            fputs(usage_text, stderr);
            return 2;
        }
        i++;
    }
    /* (A tenant name is short: 128 bytes keeps the configuration below within its buffer.) */
    if (path == NULL || window_seconds == 0 || window_seconds > 86400 || raw_api > UINT32_MAX ||
        (tenant != NULL && strlen(tenant) > 128)) {
        fputs(usage_text, stderr);
        return 2;
    }

    /* A library built for another ABI would misread our calls: refuse to run. */
    if (gm_abi_version() != GM_ABI_VERSION) {
        fprintf(stderr, "agent: library ABI %" PRIu32 ", agent built for %d\n", gm_abi_version(),
                GM_ABI_VERSION);
        return 1;
    }
    if ((prices = read_file(prices_path)) == NULL) {
        return 1;
    }
    if (failed(gm_recording_open(path, (uint32_t)raw_api, &rec), "gm_recording_open")) {
        goto out;
    }
    /* A struct the library fills says how big it is: a later library adds fields at its end. */
    memset(&item, 0, sizeof item);
    item.struct_size = sizeof item;

    /* The buffers' layout is the producer's CUPTI API version: a live agent passes its
     * CUPTI_API_VERSION, a replay the recording's. */
    snprintf(config, sizeof config, "{\"cupti_api_version\": %" PRIu32 ", \"window_seconds\": %llu",
             gm_recording_cupti_api_version(rec), window_seconds);
    if (have_horizon) {
        snprintf(config + strlen(config), sizeof config - strlen(config),
                 ", \"reorder_horizon_ns\": %llu", horizon_ns);
    }
    if (tenant != NULL) {
        strcat(config, ", \"tenant\": \"");
        json_string(config, sizeof config, tenant);
        strcat(config, "\"");
    }
    strcat(config, "}");
    if (failed(gm_meter_new(config, &meter), "gm_meter_new")) {
        goto out;
    }

    window_ns = (uint64_t)window_seconds * 1000000000u;
    for (;;) {
        if (failed(gm_recording_next(rec, &item), "gm_recording_next")) {
            goto out;
        }
        if (item.kind == GM_ITEM_END) {
            break;
        }
        switch (item.kind) {
        case GM_ITEM_DEVICE:
            if (failed(gm_meter_register_device(meter, item.device), "gm_meter_register_device")) {
                goto out;
            }
            break;
        case GM_ITEM_BUFFER: {
            /* CUPTI's buffer-completed callback: hand the valid bytes over (the library does
             * not keep them: CUPTI may reuse the buffer at once), then drain the windows that
             * closed, those ending at or before the watermark's window edge. */
            uint64_t watermark = 0, edge;
            if (failed(gm_meter_ingest_cupti_buffer(meter, item.buffer, item.buffer_size),
                       "gm_meter_ingest_cupti_buffer") ||
                failed(gm_meter_watermark_ns(meter, &watermark), "gm_meter_watermark_ns")) {
                goto out;
            }
            edge = watermark - watermark % window_ns;
            if (edge > drained_edge) {
                if (drain(meter, edge, prices) != 0) {
                    goto out;
                }
                drained_edge = edge;
            }
            break;
        }
        case GM_ITEM_DROPPED:
            if (failed(gm_meter_report_dropped(meter, item.device_id, item.dropped),
                       "gm_meter_report_dropped")) {
                goto out;
            }
            break;
        case GM_ITEM_PROCESS_EXIT:
            if (failed(gm_meter_process_exited(meter, item.pid, item.timestamp_ns),
                       "gm_meter_process_exited")) {
                goto out;
            }
            break;
        default:
            /* A kind added by a later library: nothing this agent knows how to hand over. */
            break;
        }
    }
    /* Shutdown: everything left, open windows included. */
    rc = drain(meter, UINT64_MAX, prices);
out:
    gm_meter_free(meter);
    gm_recording_free(rec);
    free(prices);
    return rc;
}

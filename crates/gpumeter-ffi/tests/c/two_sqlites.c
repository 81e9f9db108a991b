/*
 * A program with SQLite of its own that links gpumeter's C ABI (tests/linking.rs; docs/C_ABI.md,
 * issue 30 item 16). The program's sqlite3_* calls must reach its own SQLite (the system's:
 * its version is the one its header names), while the gm_* bank calls run on gpumeter's
 * bundled SQLite, on the same ledger file, in the same process.
 *
 *   two_sqlites LEDGER       prints "system sqlite X", the bank's answers, "ok"; exits 1 on a failure
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "gpumeter.h"

static int failed(gm_status status, const char *what) {
    char msg[1024];
    if (status == GM_OK) {
        return 0;
    }
    gm_last_error_message(msg, sizeof msg);
    fprintf(stderr, "two_sqlites: %s: status %" PRIu32 ": %s\n", what, status, msg);
    return 1;
}

int main(int argc, char **argv) {
    gm_bank *bank = NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;
    char *json = NULL;
    int rc = 1, tables = 0;

    if (argc != 2) {
        fputs("usage: two_sqlites LEDGER\n", stderr);
        return 2;
    }
    /* The program's own SQLite answers its calls. */
    printf("system sqlite %s\n", sqlite3_libversion());
    if (strcmp(sqlite3_libversion(), SQLITE_VERSION) != 0 ||
        sqlite3_libversion_number() != SQLITE_VERSION_NUMBER) {
        fprintf(stderr, "two_sqlites: sqlite3_libversion() is %s, the program's header says %s: "
                        "another SQLite answered the program's calls\n",
                sqlite3_libversion(), SQLITE_VERSION);
        return 1;
    }
    /* gpumeter's bank, on its own SQLite. */
    if (failed(gm_bank_open(argv[1], &bank), "gm_bank_open") ||
        failed(gm_bank_grant_json(bank,
                                  "{\"tenant\": \"acme\", \"credits\": \"5\", \"rate\": \"1\", "
                                  "\"key\": \"two-sqlites\", \"at_ns\": 1700000000000000000}",
                                  &json),
               "gm_bank_grant_json")) {
        goto out;
    }
    printf("grant %s\n", json);
    gm_string_free(json);
    json = NULL;
    if (failed(gm_bank_verify_json(bank, &json), "gm_bank_verify_json")) {
        goto out;
    }
    printf("verify %s\n", json);
    /* The program's SQLite reads the ledger gpumeter's wrote. */
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", -1,
                           &stmt, NULL) != SQLITE_OK ||
        sqlite3_step(stmt) != SQLITE_ROW) {
        fprintf(stderr, "two_sqlites: the system SQLite cannot read %s: %s\n", argv[1],
                db != NULL ? sqlite3_errmsg(db) : "out of memory");
        goto out;
    }
    tables = sqlite3_column_int(stmt, 0);
    printf("system sqlite reads %d tables\n", tables);
    if (tables > 0) {
        puts("ok");
        rc = 0;
    }
out:
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    gm_string_free(json);
    gm_bank_free(bank);
    return rc;
}

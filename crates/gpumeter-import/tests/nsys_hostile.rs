//! Nsight Systems exports that are hostile or damaged (issue 9): an object the importer would
//! read that is not an ordinary table is refused at once with a typed error naming the file and
//! the table (a view or a virtual table could run without end), and a row with a bad field is a
//! lost record (`invalid_field`), not a refused file.

use super::*;
use std::collections::BTreeMap;

/// Builds an SQLite file `name` in a new temporary folder with `sql` (run with
/// `writable_schema` on, so that tests can disguise objects).
fn build(name: &str, sql: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = ok(tempfile::tempdir());
    let path = tmp.path().join(name);
    let conn = ok(rusqlite::Connection::open(&path));
    ok(conn.execute_batch(sql));
    drop(conn);
    (tmp, path)
}

fn nsys() -> ImportOptions {
    ImportOptions {
        format: Format::Nsys,
        catalog: None,
    }
}

/// Imports `path` from the file and from its bytes (named by the whole path); both must fail,
/// leaving the meter untouched. Returns both errors.
fn refused(path: &Path) -> [ImportError; 2] {
    let mut meter = Meter::new(MeterConfig::default());
    let from_path = match import_path(&mut meter, path, &nsys()) {
        Err(e) => e,
        Ok(s) => panic!("{}: expected an error, got {s:?}", path.display()),
    };
    let bytes = ok(std::fs::read(path));
    let name = path.to_string_lossy();
    let from_bytes = match import_bytes(&mut meter, &name, &bytes, &nsys()) {
        Err(e) => e,
        Ok(s) => panic!("{name}: expected an error from bytes, got {s:?}"),
    };
    let report = ok(meter.finish());
    assert!(report.sources.is_empty() && report.devices.is_empty());
    [from_path, from_bytes]
}

/// Asserts `e` is the refusal of `table` through its `sqlite_master` row's `field`, naming the
/// file, the table and `words` in its message.
fn assert_refused(e: &ImportError, path: &Path, table: &str, field: &str, words: &[&str]) {
    let msg = e.to_string();
    match e {
        ImportError::BadField {
            path: p,
            record: RecordLocation::Row { table: t, rowid },
            field: f,
            reason,
            ..
        } => {
            assert_eq!(p, path, "{msg}");
            assert_eq!((t.as_str(), *f), ("sqlite_master", field), "{msg}");
            assert!(*rowid > 0, "{msg}");
            assert!(reason.contains(table), "{msg}");
        }
        other => panic!("expected a BadField on sqlite_master, got {other:?}"),
    }
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    for w in words {
        assert!(msg.contains(w), "`{w}` not in: {msg}");
    }
}

const SESSION: &str = "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
    INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000);";

/// A recursive view that never ends, a million-row view from a file of a few kilobytes, and
/// views standing for the other tables the importer reads: each is refused before any row is
/// read, naming the file and the table (they used to run until killed, writing gigabytes of
/// temporary files).
#[test]
fn views_are_refused_naming_the_table() {
    let endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)";
    let million = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 1000000)";
    let cases = [
        (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            format!(
                "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS {endless}
                 SELECT x AS start, x + 1 AS \"end\", 0 AS deviceId, 1 AS gridX FROM r;"
            ),
        ),
        (
            "CUPTI_ACTIVITY_KIND_MEMSET",
            format!(
                "CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS {million}
                 SELECT x AS start, x + 1 AS \"end\", 0 AS deviceId, 4 AS bytes FROM r
                 ORDER BY x DESC;"
            ),
        ),
        (
            "TARGET_INFO_SESSION_START_TIME",
            format!(
                "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
                 CREATE VIEW TARGET_INFO_SESSION_START_TIME AS {endless}
                 SELECT x AS utcEpochNs FROM r ORDER BY x DESC;"
            ),
        ),
        (
            "TARGET_INFO_GPU",
            format!("{SESSION} CREATE VIEW TARGET_INFO_GPU AS {endless} SELECT x AS id FROM r;"),
        ),
        (
            "StringIds",
            format!(
                "{SESSION} CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER, deviceId INTEGER, demangledName INTEGER);
                 INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 0, 7);
                 CREATE VIEW StringIds AS {endless} SELECT x AS id, 'k' AS value FROM r;"
            ),
        ),
    ];
    for (table, sql) in cases {
        let (_tmp, path) = build("v.sqlite", &sql);
        assert!(
            ok(std::fs::metadata(&path)).len() < 16 << 10,
            "the hostile file is tiny"
        );
        for e in refused(&path) {
            assert_refused(
                &e,
                &path,
                table,
                "type",
                &["`view`", "is a view, not a table"],
            );
        }
    }
}

/// Virtual tables run a module's code: refused, also when the schema text hides the keyword
/// behind lower case and comments.
#[test]
fn virtual_tables_are_refused_naming_the_table() {
    let fts5 = format!(
        "{SESSION} CREATE VIRTUAL TABLE CUPTI_ACTIVITY_KIND_KERNEL USING fts5(start, \"end\", deviceId);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 0);"
    );
    // A module this SQLite does not have, declared by writing the schema directly.
    let disguised = format!(
        "{SESSION} PRAGMA writable_schema = ON;
         INSERT INTO sqlite_master VALUES ('table', 'CUPTI_ACTIVITY_KIND_MEMCPY',
           'CUPTI_ACTIVITY_KIND_MEMCPY', 0,
           'create /* not a table */ -- at all
            virtual table CUPTI_ACTIVITY_KIND_MEMCPY using endless(start, \"end\", deviceId, bytes)');
         PRAGMA writable_schema = OFF;"
    );
    for (table, sql) in [
        ("CUPTI_ACTIVITY_KIND_KERNEL", fts5),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", disguised),
    ] {
        let (_tmp, path) = build("vt.sqlite", &sql);
        for e in refused(&path) {
            assert_refused(
                &e,
                &path,
                table,
                "sql",
                &["is a virtual table, not a table"],
            );
        }
    }
}

/// A generated column computes its values on read (this one a 100 MB string per row): a table
/// with one, VIRTUAL or STORED, is refused naming the table and the column.
#[test]
fn generated_columns_are_refused_naming_table_and_column() {
    let cases = [
        (
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "bytes",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER,
               bytes INTEGER GENERATED ALWAYS AS (length(printf('%.*c', 100000000, 'x'))) VIRTUAL);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, \"end\", deviceId) VALUES (1, 2, 0);",
        ),
        (
            "TARGET_INFO_GPU",
            "smCount",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
             CREATE TABLE TARGET_INFO_GPU (id INTEGER, smCount INTEGER GENERATED ALWAYS AS (id + 100) STORED);
             INSERT INTO TARGET_INFO_GPU (id) VALUES (0);",
        ),
    ];
    for (table, column, sql) in cases {
        let (_tmp, path) = build("g.sqlite", &format!("{SESSION} {sql}"));
        let words = format!("column `{column}` of {table} is a generated column");
        for e in refused(&path) {
            assert_refused(&e, &path, table, "sql", &[&words]);
        }
    }
}

/// SQLite checks that a `sqlite_master` row's type agrees with its `CREATE` text: a view
/// disguised as a table makes the schema malformed, an SQLite error (a file-level fault).
#[test]
fn a_view_disguised_as_a_table_is_a_malformed_schema() {
    let (_tmp, path) = build(
        "d.sqlite",
        &format!(
            "{SESSION} CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS
               WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
               SELECT x AS start, x AS \"end\", 0 AS deviceId FROM r;
             PRAGMA writable_schema = ON;
             UPDATE sqlite_master SET type = 'table' WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL';
             PRAGMA writable_schema = OFF;"
        ),
    );
    for e in refused(&path) {
        match &e {
            ImportError::Sqlite { context, .. } => {
                assert_eq!(context, "listing tables");
                assert!(e.to_string().contains("malformed database schema"), "{e}");
            }
            other => panic!("expected an SQLite error, got {other:?}"),
        }
    }
}

/// The file is opened through a `file:` URI: characters that URIs give a meaning (`?`, `#`,
/// `%`, blanks) are encoded, so any file name opens that file.
#[test]
fn file_names_with_uri_syntax_open() {
    for name in [
        "a b.sqlite",
        "q?immutable=0&mode=rw.sqlite",
        "h#x.sqlite",
        "p%41.sqlite",
    ] {
        let (_tmp, path) = build(
            name,
            &format!(
                "{SESSION} CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
                 INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (10, 20, 0, 7);"
            ),
        );
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, &path, &ImportOptions::default()));
        assert_eq!(s.source_name, name);
        let report = ok(meter.finish());
        assert_eq!(
            report.device_total(&source_key(&s, 0), MeterKind::MemsetBytes),
            7,
            "{name}"
        );
    }
}

/// One export, good rows and one bad row per fault class: the good rows are metered exactly,
/// each bad row is one `invalid_field` loss on its device (on the source when its `deviceId`
/// is the fault), one warning per field names the first bad row, and metered + lost = rows in,
/// per device. The same from the file and from its bytes.
#[test]
fn bad_rows_are_lost_records_and_the_rest_is_metered() {
    const UUID0: &str = "GPU-00000000-1111-2222-3333-444444444444";
    let sql = format!(
        "{SESSION}
         CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER);
         INSERT INTO TARGET_INFO_GPU VALUES (0, 'G0', '{UUID0}', 100), (1, 'G1', NULL, 50);
         CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
         INSERT INTO StringIds VALUES (1, 'saxpy');
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER, deviceId INTEGER,
           contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
           demangledName INTEGER, gridX, gridY INTEGER, gridZ INTEGER, blockX INTEGER,
           blockY INTEGER, blockZ INTEGER, registersPerThread INTEGER,
           staticSharedMemory INTEGER, dynamicSharedMemory INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
           (1000, 2000, 0, 1, 7, 11, NULL, 1, 2, 1, 1, 32, 1, 1, 16, 0, 0),
           (3000, 3500, 0, 1, 7, 12, NULL, 1, 1, 1, 1, 32, 1, 1, 16, 0, 0),
           -- rowid 3: text in gridX (device 0)
           (4000, 4100, 0, 1, 7, 13, NULL, 1, 'many', 1, 1, 32, 1, 1, 16, 0, 0),
           -- rowid 4: before 1970 once the session offset is added (device 1)
           (-1700000000000000001, 10, 1, 1, 7, 14, NULL, 1, 1, 1, 1, 32, 1, 1, 16, 0, 0),
           -- rowid 5: a negative device id (the source)
           (5000, 5100, -1, 1, 7, 15, NULL, 1, 1, 1, 1, 32, 1, 1, 16, 0, 0);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, \"end\" INTEGER, deviceId INTEGER,
           bytes INTEGER, copyKind INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES
           (6000, 6100, 1, 64, 1),
           -- rowid 2: negative bytes (device 1)
           (6200, 6300, 1, -5, 1),
           -- rowid 3: no device id (the source)
           (6400, 6500, NULL, 8, 2);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\", deviceId, bytes INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES
           (7000, 7010, 0, 16),
           -- rowid 2: a real number as a time (device 0)
           (7100, 7110.5, 0, 16),
           -- rowid 3: no byte count, on a device with no other row (device 2)
           (7200, 7210, 2, NULL),
           -- rowids 4, 5: a device id that is text, one past u32 (the source)
           (7300, 7310, 'gpu0', 16),
           (7400, 7410, 4294967296, 16);"
    );
    let (_tmp, path) = build("mixed.sqlite", &sql);
    let bytes = ok(std::fs::read(&path));

    let mut reports = Vec::new();
    for from_bytes in [false, true] {
        let mut meter = Meter::new(MeterConfig::default());
        let s = if from_bytes {
            ok(import_bytes(&mut meter, "mixed.sqlite", &bytes, &nsys()))
        } else {
            ok(import_path(&mut meter, &path, &ImportOptions::default()))
        };
        let report = ok(meter.finish());
        let (k0, k1, k2) = (UUID0.to_string(), source_key(&s, 1), source_key(&s, 2));
        let source = s.sha256[..16].to_string();
        assert_eq!(s.records, 13, "every row is metered or lost");
        assert_eq!(s.device_keys, [k0.clone(), k1.clone(), k2.clone()]);

        // The good rows, exactly.
        let t = |key: &str, m| report.device_total(key, m);
        assert_eq!(t(&k0, MeterKind::KernelLaunches), 2);
        assert_eq!(t(&k0, MeterKind::KernelNs), 1000 + 500);
        assert_eq!(t(&k0, MeterKind::GpuBusyNs), 1000 + 500 + 10);
        assert_eq!(t(&k0, MeterKind::SmNs), 2 * 1000 + 500);
        assert_eq!(t(&k0, MeterKind::MemsetBytes), 16);
        assert_eq!(t(&k1, MeterKind::KernelLaunches), 0);
        assert_eq!(t(&k1, MeterKind::MemcpyHtodBytes), 64);
        assert_eq!(t(&k1, MeterKind::GpuBusyNs), 100);
        assert_eq!(t(&k2, MeterKind::GpuBusyNs), 0);
        assert_eq!(
            (
                report.records.kernel,
                report.records.memcpy,
                report.records.memset
            ),
            (2, 1, 1)
        );

        // The losses, per device: invalid_field only, the source's with `device: None`.
        for (key, device, lost) in [
            (&k0, Some(0), 2),
            (&k1, Some(1), 2),
            (&k2, Some(2), 1),
            (&source, None, 4),
        ] {
            assert_eq!(report.lost(key, "invalid_field"), lost, "{key}");
            let rows: Vec<_> = report
                .loss
                .iter()
                .filter(|l| &l.device_key == key)
                .collect();
            assert_eq!(rows.len(), 1, "{key}: {rows:?}");
            assert_eq!(
                (rows[0].device, rows[0].lower_bound),
                (device, false),
                "{key}"
            );
        }
        assert_eq!(report.loss.len(), 4, "{:?}", report.loss);
        // Metered + lost = rows in, per device (rows in: 5, 3, 1 and 4 without a device); the
        // metered memcpy and memset records are told by their bytes above.
        let metered_0 = t(&k0, MeterKind::KernelLaunches) + 1; // + the 16-byte memset
        let metered_1 = 1; // the 64-byte memcpy
        assert_eq!(metered_0 + u128::from(report.lost(&k0, "invalid_field")), 5);
        assert_eq!(metered_1 + u128::from(report.lost(&k1, "invalid_field")), 3);
        assert_eq!(report.lost(&k2, "invalid_field"), 1);
        assert_eq!(
            report.records.kernel
                + report.records.memcpy
                + report.records.memset
                + report.loss.iter().map(|l| l.records).sum::<u64>(),
            13
        );
        let dev2 = report
            .device(&k2)
            .unwrap_or_else(|| panic!("device 2 is listed"));
        assert_eq!(dev2.device, 2);

        // One warning per field, naming the first bad row: table, rowid, field and value.
        for words in [
            &[
                "CUPTI_ACTIVITY_KIND_KERNEL rowid 3",
                "field `gridX` = `many`",
                "expected an integer",
                "the record was lost (invalid_field)",
            ][..],
            &[
                "CUPTI_ACTIVITY_KIND_KERNEL rowid 4",
                "field `start` = `-1700000000000000001`",
                "utcEpochNs 1700000000000000000 + start -1700000000000000001 = -1 ns",
                "before 1970",
            ],
            &[
                "CUPTI_ACTIVITY_KIND_KERNEL rowid 5",
                "field `deviceId` = `-1`",
                "this and 3 more records with this field were lost (invalid_field)",
            ],
            &[
                "CUPTI_ACTIVITY_KIND_MEMCPY rowid 2",
                "field `bytes` = `-5`",
                "negative",
                "this and 1 more records",
            ],
            &[
                "CUPTI_ACTIVITY_KIND_MEMSET rowid 2",
                "field `end` = `7110.5`",
            ],
        ] {
            assert!(
                report
                    .warnings
                    .iter()
                    .any(|w| w.contains("mixed.sqlite") && words.iter().all(|x| w.contains(x))),
                "no warning with {words:?} in {:#?}",
                report.warnings
            );
        }
        assert_eq!(
            report
                .warnings
                .iter()
                .filter(|w| w.ends_with("were lost (invalid_field)")
                    || w.ends_with("the record was lost (invalid_field)"))
                .count(),
            5,
            "one warning per field: {:#?}",
            report.warnings
        );
        reports.push((report.loss, report.totals));
    }
    assert_eq!(
        reports[0], reports[1],
        "the file and its bytes meter the same"
    );
}

/// Faults of what describes the file, not a record, stay errors: a bad device description, a
/// bad session start, a missing required column.
#[test]
fn file_level_faults_stay_errors() {
    let memset = "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
                  INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1, 2, 0, 4);";
    let cases = [
        (
            format!(
                "{SESSION} {memset} CREATE TABLE TARGET_INFO_GPU (id INTEGER, smCount INTEGER);
                 INSERT INTO TARGET_INFO_GPU VALUES (0, 'lots');"
            ),
            "TARGET_INFO_GPU",
            "smCount",
            "lots",
        ),
        (
            format!(
                "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
                 INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (-5); {memset}"
            ),
            "TARGET_INFO_SESSION_START_TIME",
            "utcEpochNs",
            "-5",
        ),
    ];
    for (sql, table, field, value) in cases {
        let (_tmp, path) = build("f.sqlite", &sql);
        for e in refused(&path) {
            match e {
                ImportError::BadField {
                    record: RecordLocation::Row { table: t, rowid },
                    field: f,
                    value: v,
                    ..
                } => assert_eq!((t.as_str(), rowid, f, v.as_str()), (table, 1, field, value)),
                other => panic!("expected BadField, got {other:?}"),
            }
        }
    }
    let (_tmp, path) = build(
        "c.sqlite",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, deviceId INTEGER, bytes INTEGER);",
    );
    for e in refused(&path) {
        assert!(
            matches!(&e, ImportError::MissingColumn { table, column, .. }
                if table == "CUPTI_ACTIVITY_KIND_MEMCPY" && column == "end"),
            "{e:?}"
        );
    }
}

/// The shared Perlmutter export loses nothing and gives all its 20 records (its numbers are
/// checked against EXPECTED.md in `expected::nsys_sqlite`).
#[test]
fn the_shared_export_loses_nothing() {
    let Some(dir) = data_dir() else { return };
    for from_bytes in [false, true] {
        let mut meter = Meter::new(MeterConfig::default());
        let s = if from_bytes {
            let bytes = ok(std::fs::read(dir.join(NSYS)));
            ok(import_bytes(
                &mut meter,
                NSYS,
                &bytes,
                &ImportOptions::default(),
            ))
        } else {
            ok(import_path(
                &mut meter,
                &dir.join(NSYS),
                &ImportOptions::default(),
            ))
        };
        assert_eq!(s.records, 20);
        let report = ok(meter.finish());
        assert!(report.loss.is_empty(), "{:?}", report.loss);
        assert_eq!(
            (
                report.records.kernel,
                report.records.memcpy,
                report.records.memset
            ),
            (5, 15, 0)
        );
        assert!(
            report.warnings.iter().all(|w| !w.contains("invalid_field")),
            "{:?}",
            report.warnings
        );
    }
}

/// A WAL-mode export (header bytes 18, 19 = 2), its content all in the file: the same from the
/// file (read immutable, no `-wal` looked for) and from its bytes.
#[test]
fn a_wal_mode_export_reads_from_file_and_bytes() {
    let (_tmp, path) = build(
        "w.sqlite",
        &format!(
            "PRAGMA journal_mode = WAL; {SESSION}
             CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (10, 20, 0, 7);"
        ),
    );
    let bytes = ok(std::fs::read(&path));
    assert_eq!(bytes.get(18..20), Some(&[2u8, 2][..]), "a WAL-mode file");
    for from_bytes in [false, true] {
        let mut meter = Meter::new(MeterConfig::default());
        let s = if from_bytes {
            ok(import_bytes(&mut meter, "w.sqlite", &bytes, &nsys()))
        } else {
            ok(import_path(&mut meter, &path, &nsys()))
        };
        let report = ok(meter.finish());
        assert_eq!(
            report.device_total(&source_key(&s, 0), MeterKind::MemsetBytes),
            7,
            "from bytes: {from_bytes}"
        );
    }
}

/// Two GPUs without UUIDs on two VMs (bits 48..63 of `globalPid`), both `deviceId` 0: two
/// devices, each with its own name and usage, never one device that bills one GPU's work at
/// the other's price.
#[test]
fn two_vms_without_uuids_are_two_devices() {
    let vm1: i64 = 1 << 48;
    let sql = format!(
        "{SESSION}
        CREATE TABLE TARGET_INFO_GPU (id INTEGER, vmId INTEGER, name TEXT, smCount INTEGER);
        INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H100 80GB HBM3', 132);
        INSERT INTO TARGET_INFO_GPU VALUES (0, {vm1}, 'NVIDIA H200', 132);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
            globalPid INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, {pid0}, 1, 1, 1);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 400, 0, {pid1}, 1, 1, 1);",
        pid0 = 4242_i64 << 24,
        pid1 = vm1 | (4343_i64 << 24),
    );
    let (_tmp, path) = build("vms.sqlite", &sql);
    let mut meter = Meter::new(MeterConfig::default());
    let s = ok(import_path(&mut meter, &path, &nsys()));
    assert_eq!(s.device_keys.len(), 2, "{:?}", s.device_keys);
    let r = ok(meter.finish());
    let kernel_ns: BTreeMap<Option<String>, u128> = r
        .devices
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                r.device_total(&d.device_key, MeterKind::KernelNs),
            )
        })
        .collect();
    assert_eq!(
        kernel_ns,
        BTreeMap::from([
            (Some("NVIDIA H100 80GB HBM3".to_string()), 100),
            (Some("NVIDIA H200".to_string()), 300),
        ])
    );
    let label = s.sha256[..16].to_string();
    assert!(
        s.device_keys.contains(&format!("{label}#0@vm0"))
            && s.device_keys.contains(&format!("{label}#0@vm1")),
        "{:?}",
        s.device_keys
    );
}

/// `path` with `suffix` appended to its file name (`x.sqlite` → `x.sqlite-wal`).
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Kernel rows (start, end) of a table `CUPTI_ACTIVITY_KIND_KERNEL`, counted by a plain SQLite
/// reader (one that reads a `-wal` file, as `sqlite3` does).
fn kernel_rows_seen_by_sqlite(path: &Path) -> i64 {
    let conn = ok(rusqlite::Connection::open(path));
    ok(
        conn.query_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| {
            r.get(0)
        }),
    )
}

/// A WAL-mode export whose rows are committed to its `-wal` file but not checkpointed into the
/// file (copied while the writer was still open): `sqlite3` sees the rows, but the importer
/// reads exactly the hashed bytes of the file, which hold none. It is refused, naming the
/// file and saying how to checkpoint it; once checkpointed it imports all five kernels. An
/// empty `-wal` file, or a `-wal` file beside a database that is not in WAL mode, changes
/// nothing.
#[test]
fn an_uncheckpointed_wal_is_refused_naming_the_file() {
    let tmp = ok(tempfile::tempdir());
    let live = tmp.path().join("live.sqlite");
    let copy = tmp.path().join("copy.sqlite");
    let other = tmp.path().join("other.sqlite");
    let conn = ok(rusqlite::Connection::open(&live));
    // The tables are checkpointed into the file, the rows are not: read alone, the file is a
    // valid export with no records.
    ok(conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; {SESSION}
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER, deviceId INTEGER);
         PRAGMA wal_checkpoint(TRUNCATE);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 20, 0), (30, 40, 0), (50, 60, 0),
           (70, 80, 0), (90, 100, 0);"
    )));
    // Copied while the writer is open: the rows are in the -wal file only.
    for to in [&copy, &other] {
        ok(std::fs::copy(&live, to));
        ok(std::fs::copy(sidecar(&live, "-wal"), sidecar(to, "-wal")));
    }
    drop(conn);
    assert!(ok(std::fs::metadata(sidecar(&copy, "-wal"))).len() > 0);
    let head = ok(std::fs::read(&copy));
    assert_eq!(head.get(18..20), Some(&[2u8, 2][..]), "a WAL-mode file");
    // What a normal reader sees (it checkpoints `other` as it closes).
    assert_eq!(kernel_rows_seen_by_sqlite(&other), 5);

    let mut meter = Meter::new(MeterConfig::default());
    let msg = match import_path(&mut meter, &copy, &nsys()) {
        Err(e @ ImportError::Io { .. }) => {
            if let ImportError::Io { path, source } = &e {
                assert_eq!(path, &copy);
                assert_eq!(source.kind(), std::io::ErrorKind::InvalidData, "{e}");
            }
            e.to_string()
        }
        Err(e) => panic!("expected an Io error naming the file, got {e:?}"),
        Ok(s) => panic!("expected the file to be refused, got {s:?}"),
    };
    for words in [
        copy.display().to_string(),
        sidecar(&copy, "-wal").display().to_string(),
        "WAL mode".to_string(),
        "PRAGMA wal_checkpoint(TRUNCATE)".to_string(),
    ] {
        assert!(msg.contains(&words), "`{words}` not in: {msg}");
    }
    // SQLite looks for the log beside the file a symbolic link points to.
    #[cfg(unix)]
    {
        let elsewhere = ok(tempfile::tempdir());
        let link = elsewhere.path().join("link.sqlite");
        ok(std::os::unix::fs::symlink(&copy, &link));
        match import_path(&mut meter, &link, &nsys()) {
            Err(ImportError::Io { path, source }) => {
                assert_eq!(path, link);
                assert!(source.to_string().contains("wal_checkpoint"), "{source}");
            }
            other => panic!("expected the link to be refused, got {other:?}"),
        }
    }
    // Nor as one of several files; the meter is untouched.
    assert!(import_paths(&mut meter, &[&other, &copy], &nsys()).is_err());
    let report = ok(meter.finish());
    assert!(report.sources.is_empty() && report.devices.is_empty());

    // Checkpointed, the file holds the rows; its -wal is then empty or gone.
    {
        let conn = ok(rusqlite::Connection::open(&copy));
        ok(conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);"));
    }
    let kernels = |path: &Path| {
        let mut meter = Meter::new(MeterConfig::default());
        ok(import_path(&mut meter, path, &nsys()));
        ok(meter.finish()).records.kernel
    };
    assert_eq!(kernels(&copy), 5);
    // An empty -wal file holds nothing: fine.
    ok(std::fs::write(sidecar(&copy, "-wal"), b""));
    assert_eq!(kernels(&copy), 5);
    // A -wal file beside a database that is not in WAL mode is not read by SQLite either.
    let (_tmp2, rollback) = build(
        "rollback.sqlite",
        &format!(
            "{SESSION} CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER, deviceId INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 20, 0);"
        ),
    );
    ok(std::fs::write(sidecar(&rollback, "-wal"), b"not a log"));
    assert_eq!(kernels(&rollback), 1);
}

/// SQLite's column names are case-insensitive: `START`, `DeviceID`, `BYTES`, … are the columns
/// the importer reads, in every table it reads, with the same result as the usual spelling.
#[test]
fn column_names_match_in_any_case() {
    let usual = format!(
        "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
         INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000);
         CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER);
         INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100', NULL, 132);
         CREATE TABLE StringIds (id INTEGER, value TEXT);
         INSERT INTO StringIds VALUES (1, 'saxpy');
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER, deviceId INTEGER,
           globalPid INTEGER, demangledName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 2000, 0, {pid}, 1, 4, 1, 1);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, \"end\" INTEGER, deviceId INTEGER,
           bytes INTEGER, copyKind INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (3000, 3100, 0, 64, 2);",
        pid = 4242_i64 << 24,
    );
    let shouted = usual
        .replace("(utcEpochNs", "(UTCEPOCHNS")
        .replace("(id INTEGER, name TEXT, uuid TEXT, smCount", "(ID INTEGER, Name TEXT, UUID TEXT, SMCOUNT")
        .replace("(id INTEGER, value TEXT)", "(ID INTEGER, VALUE TEXT)")
        .replace(
            "(start INTEGER, \"end\" INTEGER, deviceId INTEGER,\n           globalPid INTEGER, demangledName INTEGER, gridX INTEGER, gridY INTEGER, gridZ",
            "(START INTEGER, \"End\" INTEGER, DEVICEID INTEGER,\n           GLOBALPID INTEGER, DemangledName INTEGER, GRIDX INTEGER, GridY INTEGER, gridz",
        )
        .replace(
            "(start INTEGER, \"end\" INTEGER, deviceId INTEGER,\n           bytes INTEGER, copyKind",
            "(Start INTEGER, \"END\" INTEGER, deviceid INTEGER,\n           BYTES INTEGER, COPYKIND",
        );
    assert!(
        shouted.contains("START") && shouted.contains("COPYKIND") && shouted.contains("UTCEPOCHNS")
    );
    let mut results = Vec::new();
    for (name, sql) in [("usual.sqlite", &usual), ("shouted.sqlite", &shouted)] {
        let (_tmp, path) = build(name, sql);
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, &path, &nsys()));
        let r = ok(meter.finish());
        let key = source_key(&s, 0);
        let dev = r.device(&key).unwrap_or_else(|| panic!("{name}: device 0"));
        let got = (
            dev.name.clone(),
            dev.sm_count,
            r.usage.first().map(|u| u.window_start.clone()),
            r.device_total(&key, MeterKind::KernelNs),
            r.device_total(&key, MeterKind::SmNs),
            r.device_total(&key, MeterKind::MemcpyDtohBytes),
        );
        assert_eq!(
            got,
            (
                Some("NVIDIA H100".to_string()),
                Some(132),
                Some("2023-11-14T22:00:00Z".to_string()),
                1000,
                4 * 1000,
                64,
            ),
            "{name}"
        );
        results.push(got);
    }
    // And the process id comes through too (a tenant map by pid).
    let (_tmp, path) = build("shouted.sqlite", &shouted);
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(TenantMap {
        external: HashMap::new(),
        pid: HashMap::from([(4242, tn("carol"))]),
    });
    ok(import_path(&mut meter, &path, &nsys()));
    let r = ok(meter.finish());
    let kernel: Vec<_> = r
        .usage
        .iter()
        .filter(|u| u.meter == MeterKind::KernelNs)
        .map(|u| u.tenant.as_str())
        .collect();
    assert_eq!(kernel, ["carol"], "{:?}", r.usage);
}

/// A declared column named `rowid` (or `_rowid_`, `oid`, in any case) hides SQLite's rowid
/// under that name: rows are named by the first of the three names the table leaves free, so
/// a warning names the row SQLite numbers, in activity tables, `TARGET_INFO_GPU` and the session
/// table alike.
#[test]
fn a_column_named_rowid_does_not_hide_the_rowid() {
    for (hidden, free) in [
        ("rowid TEXT", "_rowid_"),
        ("ROWID TEXT, _rowid_ TEXT", "oid"),
        ("_ROWID_ BLOB, oid TEXT", "rowid"),
    ] {
        let values = |v: &str| {
            hidden
                .split(", ")
                .map(|_| format!("'{v}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let sql = format!(
            "CREATE TABLE TARGET_INFO_SESSION_START_TIME ({hidden}, utcEpochNs INTEGER);
             INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES ({s}, 1700000000000000000);
             CREATE TABLE TARGET_INFO_GPU ({hidden}, id INTEGER, name TEXT);
             INSERT INTO TARGET_INFO_GPU VALUES ({g}, 0, 'NVIDIA H100');
             CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET ({hidden}, start INTEGER, \"end\" INTEGER,
               deviceId INTEGER, bytes INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES ({a}, 10, 20, 0, 7), ({b}, 30, 40, 0, -5);",
            s = values("s"),
            g = values("g"),
            a = values("a"),
            b = values("b"),
        );
        let (_tmp, path) = build("r.sqlite", &sql);
        let bytes = ok(std::fs::read(&path));
        for from_bytes in [false, true] {
            let mut meter = Meter::new(MeterConfig::default());
            let s = if from_bytes {
                ok(import_bytes(&mut meter, "r.sqlite", &bytes, &nsys()))
            } else {
                ok(import_path(&mut meter, &path, &nsys()))
            };
            let r = ok(meter.finish());
            let key = source_key(&s, 0);
            let what = format!("{hidden} (rows by {free}), from bytes: {from_bytes}");
            assert_eq!(r.device_total(&key, MeterKind::MemsetBytes), 7, "{what}");
            assert_eq!(r.lost(&key, "invalid_field"), 1, "{what}");
            let dev = r.device(&key).unwrap_or_else(|| panic!("{what}: device 0"));
            assert_eq!(dev.name.as_deref(), Some("NVIDIA H100"), "{what}");
            assert_eq!(
                r.usage.first().map(|u| u.window_start.as_str()),
                Some("2023-11-14T22:00:00Z"),
                "{what}"
            );
            assert!(
                r.warnings.iter().any(|w| w.contains(
                    "CUPTI_ACTIVITY_KIND_MEMSET rowid 2: field `bytes` = `-5`"
                )),
                "{what}: {:?}",
                r.warnings
            );
        }
    }
}

/// A table whose rowid cannot be read, because it declares columns named `rowid`, `_rowid_`
/// and `oid`, or because it is a `WITHOUT ROWID` table, is refused naming the table: the
/// importer names rows by rowid, and nsys writes no such table.
#[test]
fn a_table_without_a_readable_rowid_is_refused_naming_it() {
    let cases = [
        (
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (rowid TEXT, _rowid_ TEXT, OID TEXT,
               start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES ('a', 'b', 'c', 10, 20, 0, 7);",
            "declares columns named rowid, _rowid_ and oid",
        ),
        (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER,
               deviceId INTEGER, PRIMARY KEY (start, \"end\", deviceId)) WITHOUT ROWID;
             INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 20, 0);",
            "is a WITHOUT ROWID table",
        ),
        (
            "TARGET_INFO_GPU",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, \"end\" INTEGER, deviceId INTEGER, bytes INTEGER);
             CREATE TABLE TARGET_INFO_GPU (id INTEGER PRIMARY KEY, name TEXT) WITHOUT ROWID;
             INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100');",
            "is a WITHOUT ROWID table",
        ),
    ];
    for (table, sql, words) in cases {
        let (_tmp, path) = build("nr.sqlite", &format!("{SESSION} {sql}"));
        for e in refused(&path) {
            assert_refused(
                &e,
                &path,
                table,
                "sql",
                &[words, "has no rowid the importer can read"],
            );
        }
    }
}

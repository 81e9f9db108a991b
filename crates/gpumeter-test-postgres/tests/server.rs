//! The throwaway schemas against the test server (GPUMETER_TEST_POSTGRES; scripts/test starts
//! one): each test says `skipped:` without a server, and fails under CI=true.

use gpumeter_test_postgres::{batch, query_i64, query_text, server_for, Schema};

/// How many schemas of this name the server has (0 or 1), asked over the server's own URL.
fn schemas_named(server: &str, name: &str) -> i64 {
    // Schema names are letters, digits and `_` only: safe inside a literal.
    query_i64(
        server,
        &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{name}'"),
    )
    .expect("the test server runs it")
}

#[test]
fn a_fresh_schema_is_the_search_path_of_its_url() {
    let Some(schema) = Schema::fresh("a_fresh_schema_is_the_search_path_of_its_url") else {
        return;
    };
    assert!(
        schema.name.starts_with("gmtest_a_fresh_schema_is_"),
        "{}",
        schema.name
    );
    assert_eq!(
        query_text(&schema.url, "SHOW search_path").expect("the test server runs it"),
        schema.name
    );
    assert_eq!(
        query_text(&schema.url, "SELECT current_schema()::text").expect("the test server runs it"),
        schema.name
    );
    // An unqualified table lands in the schema, not in public.
    batch(
        &schema.url,
        "CREATE TABLE t (x int); INSERT INTO t VALUES (7)",
    )
    .expect("the test server runs it");
    let server =
        server_for("a_fresh_schema_is_the_search_path_of_its_url").expect("Schema::fresh found it");
    assert_eq!(
        query_i64(
            &server,
            &format!("SELECT x::bigint FROM \"{}\".t", schema.name)
        )
        .expect("the test server runs it"),
        7
    );
    assert_eq!(
        query_i64(
            &server,
            &format!(
                "SELECT count(*) FROM information_schema.tables \
                 WHERE table_name = 't' AND table_schema = '{}'",
                schema.name
            )
        )
        .expect("the test server runs it"),
        1
    );
}

#[test]
fn two_fresh_schemas_are_apart() {
    let Some(a) = Schema::fresh("two_fresh_schemas_are_apart") else {
        return;
    };
    let b = Schema::fresh("two_fresh_schemas_are_apart").expect("the first one found it");
    assert_ne!(a.name, b.name);
    assert_ne!(a.url, b.url);
    batch(
        &a.url,
        "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)",
    )
    .expect("the test server runs it");
    batch(&b.url, "CREATE TABLE t (x int); INSERT INTO t VALUES (3)")
        .expect("the test server runs it");
    assert_eq!(
        query_i64(&a.url, "SELECT sum(x)::bigint FROM t").expect("the test server runs it"),
        3
    );
    assert_eq!(
        query_i64(&b.url, "SELECT sum(x)::bigint FROM t").expect("the test server runs it"),
        3
    );
    assert_eq!(
        query_i64(&b.url, "SELECT count(*) FROM t").expect("the test server runs it"),
        1
    );
    assert_eq!(
        query_i64(&a.url, "SELECT count(*) FROM t").expect("the test server runs it"),
        2
    );
}

#[test]
fn a_dropped_schema_is_gone_with_its_tables() {
    let Some(schema) = Schema::fresh("a_dropped_schema_is_gone_with_its_tables") else {
        return;
    };
    let server =
        server_for("a_dropped_schema_is_gone_with_its_tables").expect("Schema::fresh found it");
    batch(&schema.url, "CREATE TABLE t (x int)").expect("the test server runs it");
    let name = schema.name.clone();
    assert_eq!(schemas_named(&server, &name), 1);
    drop(schema);
    assert_eq!(schemas_named(&server, &name), 0);
}

#[test]
fn execute_counts_the_rows_a_statement_changes() {
    let Some(schema) = Schema::fresh("execute_counts_the_rows_a_statement_changes") else {
        return;
    };
    batch(
        &schema.url,
        "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2), (3)",
    )
    .expect("the test server runs it");
    let changed =
        gpumeter_test_postgres::execute(&schema.url, "UPDATE t SET x = x + 10 WHERE x >= 2")
            .expect("the test server runs it");
    assert_eq!(changed, 2);
    assert_eq!(
        query_i64(&schema.url, "SELECT sum(x)::bigint FROM t").expect("the test server runs it"),
        26
    );
    // Two statements are batch's, not execute's.
    assert!(gpumeter_test_postgres::execute(&schema.url, "SELECT 1; SELECT 2").is_err());
}

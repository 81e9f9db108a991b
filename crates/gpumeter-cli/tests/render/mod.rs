//! `preview --csv FILE` and `--html FILE`: written besides the text or JSON on standard
//! output, combinable, byte-stable; a file that cannot be written is exit 1 naming it.

use super::*;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn csv_and_html_are_written_besides_json_and_agree_with_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (csv_path, html_path) = (dir.path().join("inv.csv"), dir.path().join("inv.html"));
    let ex = example();
    let bk = book();
    let args = [
        "preview",
        s(&ex),
        "--prices",
        s(&bk),
        "--json",
        "--csv",
        s(&csv_path),
        "--html",
        s(&html_path),
    ];
    let out = gpumeter(&args);
    let doc = json(&out);
    let lines: Vec<&Value> = doc["invoices"]
        .as_array()
        .expect("invoices")
        .iter()
        .flat_map(|i| i["lines"].as_array().expect("lines").iter())
        .collect();
    assert!(!lines.is_empty());

    let csv_text = read(&csv_path);
    let mut rows = csv_text.split("\r\n").filter(|l| !l.is_empty());
    let header = rows.next().expect("header");
    assert!(header.starts_with("tenant,period_from,period_to,currency,kind,sku,meter"));
    let rows: Vec<&str> = rows.collect();
    assert_eq!(rows.len(), lines.len(), "{csv_text}");
    for (row, line) in rows.iter().zip(&lines) {
        let amount = line["amount"].as_str().expect("amount");
        assert!(row.contains(&format!(",{amount},")), "{row} lacks {amount}");
    }

    let html = read(&html_path);
    assert!(
        !html.contains("<script") && !html.contains("http"),
        "{html}"
    );
    // The example has two H100s: one chart each.
    assert_eq!(html.matches("<svg").count(), 2);
    for line in &lines {
        let amount = line["amount"].as_str().expect("amount");
        assert!(html.contains(&format!(">{amount}</td></tr>")), "{amount}");
    }

    // The same command again writes the same bytes.
    let again = gpumeter(&args);
    assert!(again.status.success());
    assert_eq!(read(&csv_path), csv_text);
    assert_eq!(read(&html_path), html);
}

#[test]
fn the_text_table_still_goes_to_stdout_with_html_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let html_path = dir.path().join("inv.html");
    let (ex, bk) = (example(), book());
    let out = gpumeter(&[
        "preview",
        s(&ex),
        "--prices",
        s(&bk),
        "--html",
        s(&html_path),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Invoice for tenant"),
        "{}",
        stdout(&out)
    );
    assert!(read(&html_path).contains("<h2>Utilization</h2>"));
}

#[test]
fn an_unwritable_file_is_exit_1_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ex, bk) = (example(), book());
    for flag in ["--csv", "--html"] {
        let bad = dir.path().join("no-such-dir").join(format!("x{flag}"));
        let out = gpumeter(&["preview", s(&ex), "--prices", s(&bk), flag, s(&bad)]);
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("cannot write") && e.contains(s(&bad)), "{e}");
        assert!(stdout(&out).is_empty(), "nothing on stdout after a failure");
    }
}

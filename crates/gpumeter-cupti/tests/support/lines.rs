// Shared by the integration tests of gpumeter-cupti (tests/main.rs, `cross_check`) and
// gpumeter-recording (tests/main.rs, `recorded`), each of which `include!`s it: the lines
// the C helper and libcupti's walk print, and their agreement with the decoder.

/// One `record`/`walk` line: kind, offset, and `name=value` pairs in order.
type Line = (u32, usize, Vec<(String, String)>);

fn parse_lines(text: &str, tag: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some(tag) {
            continue;
        }
        let mut kind = None;
        let mut offset = None;
        let mut fields = Vec::new();
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                panic!("bad word {w:?} in {line:?}")
            };
            match k {
                "kind" => kind = v.parse().ok(),
                "offset" => offset = v.parse().ok(),
                _ => fields.push((k.to_string(), v.to_string())),
            }
        }
        match (kind, offset) {
            (Some(k), Some(o)) => out.push((k, o, fields)),
            _ => panic!("no kind/offset in {line:?}"),
        }
    }
    out
}

/// The little-endian bytes a C-printed value stands for, at the field's width.
fn value_bytes(value: &str, width: usize) -> Vec<u8> {
    if width == 16 {
        return ok(hex::decode(value));
    }
    let n: i128 = match value.parse() {
        Ok(n) => n,
        Err(e) => panic!("value {value:?}: {e}"),
    };
    n.to_le_bytes()[..width].to_vec()
}

/// Compares decoded records with C lines field by field; returns the number of fields
/// compared.
fn agree(api: ApiVersion, buf: &[u8], lines: &[Line], what: &str) -> usize {
    let d = ok(decode(buf, api));
    assert_eq!(d.records.len(), lines.len(), "{api} {what}: record count");
    let layouts = api.layouts();
    let mut compared = 0;
    for (rec, (kind, offset, fields)) in d.records.iter().zip(lines) {
        assert_eq!(
            (rec.kind.0, rec.offset),
            (*kind, *offset),
            "{api} {what}: kind/offset"
        );
        let layout = layouts
            .iter()
            .find(|l| l.kind == rec.kind)
            .unwrap_or_else(|| panic!("no layout for {}", rec.kind));
        let ours: BTreeMap<&str, Vec<u8>> =
            fields_of(rec.kind, &rec.record).into_iter().collect();
        for (name, value) in fields {
            let f = layout
                .fields
                .iter()
                .find(|f| f.name == name)
                .unwrap_or_else(|| {
                    panic!("{api} {what}: {} has no field {name}", layout.struct_name)
                });
            let got = ours.get(name.as_str()).unwrap_or_else(|| {
                panic!("{api} {what}: decoder gives no {name} for {}", rec.kind)
            });
            assert_eq!(
                got,
                &value_bytes(value, f.width),
                "{api} {what}: {} at {offset}: field {name} (C says {value})",
                rec.kind
            );
            compared += 1;
        }
    }
    compared
}

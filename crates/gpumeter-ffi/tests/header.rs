//! The committed header, `bindings/c/gpumeter.h`, is what the pinned cbindgen makes of this
//! crate now (DESIGN §9: generated, committed, checked in CI). With `GPUMETER_BLESS=1` the
//! test rewrites the header instead of failing.

use std::path::PathBuf;

#[test]
fn header_is_current() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.join("../..");
    let config = cbindgen::Config::from_file(root.join("bindings/c/cbindgen.toml"))?;
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()?
        .write(&mut generated);
    let path = root.join("bindings/c/gpumeter.h");
    if std::env::var_os("GPUMETER_BLESS").is_some() {
        std::fs::write(&path, &generated)?;
        return Ok(());
    }
    let committed = std::fs::read(&path)?;
    assert!(
        committed == generated,
        "bindings/c/gpumeter.h is stale: regenerate it with \
         `GPUMETER_BLESS=1 cargo test -p gpumeter-ffi --test header` and commit it"
    );
    Ok(())
}

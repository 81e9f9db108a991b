//! The README's embedding example is `examples/embed.rs`, shown whole in the README and run
//! here, so the README can neither drift from the API nor show code that fails.

/// `examples/embed.rs` as a module (its `main` is `pub` for this).
#[path = "../../examples/embed.rs"]
mod embed;

/// The README shows `examples/embed.rs` byte for byte, inside a `rust` code block.
#[test]
fn readme_shows_the_embedding_example_whole() {
    let readme = std::fs::read_to_string("README.md").expect("README.md");
    let example = std::fs::read_to_string("examples/embed.rs").expect("examples/embed.rs");
    assert!(
        readme.contains(&format!("```rust\n{example}```\n")),
        "README.md does not show examples/embed.rs as it is: copy the file into its ```rust block"
    );
    let lines = example.lines().count();
    assert!(
        lines <= 15,
        "the embedding example has {lines} lines; the README promises 15 at most"
    );
}

/// The example runs: it meters the shipped example input and rates it with the shipped price
/// book (tests run in the package root, where its relative paths resolve).
#[test]
fn the_embedding_example_runs() {
    if let Err(e) = embed::main() {
        panic!("examples/embed.rs failed: {e}");
    }
}

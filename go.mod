// The Go module of gpumeter's examples: `go run ./examples/go` (examples/README.md,
// "Agents"). The library itself is Rust (Cargo.toml); the Go code here only calls its C ABI
// through cgo.
module example.invalid/gpumeter

go 1.19

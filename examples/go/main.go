// Command go is a gpumeter node agent in Go, through cgo (examples/README.md, "Agents"):
// the way a Kubernetes node agent (a device plugin or an exporter that already owns a
// CUPTI subscription) embeds gpumeter.
//
// It replays a CUPTI recording (a .gmr, or a raw activity buffer file) through
// libgpumeter_ffi exactly as a live subscription would drive it: every completed activity
// buffer goes to the hot path (gm_meter_ingest_cupti_buffer) one by one, and whenever the
// meter's watermark passes a window edge the windows closed before it are drained. Each
// drained usage report is printed to stdout as the library wrote it (one JSON document per
// line), followed by its invoice (gm_rate_json); a real agent would ship the report to the
// billing service instead. At the end everything left is drained.
//
//	scripts/build-c-abi
//	go run ./examples/go examples/data/h200-cuda13-smoke.gmr
//
// The directives below find the header in bindings/c and the library in target/debug/c-abi/lib
// (scripts/build-c-abi's output); with another CARGO_TARGET_DIR, put its directory first:
//
//	L=$CARGO_TARGET_DIR/debug/c-abi/lib
//	CGO_LDFLAGS="-L$L -Wl,-rpath,$L" go run ./examples/go ...
//
// or, with an installed copy (docs/C_ABI.md, "Installing"), CGO_CFLAGS and CGO_LDFLAGS from
// `pkg-config --cflags --libs gpumeter`.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../bindings/c
#cgo LDFLAGS: -L${SRCDIR}/../../target/debug/c-abi/lib -Wl,-rpath,${SRCDIR}/../../target/debug/c-abi/lib -lgpumeter_ffi
#include <stdlib.h>
#include "gpumeter.h"
*/
import "C"

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// abiVersion is GM_ABI_VERSION of the header this file was written against.
const abiVersion = 2

// call runs one library call and turns a failed status into an error with the library's
// message. The message is kept per OS thread, and Go moves goroutines between threads, so
// the goroutine stays on its thread from the call until the message is read.
func call(what string, f func() C.gm_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := f()
	if status == C.GM_OK {
		return nil
	}
	n := C.gm_last_error_message(nil, 0)
	buf := make([]byte, n+1)
	C.gm_last_error_message((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return fmt.Errorf("%s: status %d: %s", what, uint32(status), buf[:n])
}

// decimal is a flag value of decimal digits only, as the C and Python agents take: the flag
// package's own integers also read 0x3c, 060 (octal) and 6_0.
type decimal uint64

func (d *decimal) String() string { return strconv.FormatUint(uint64(*d), 10) }

func (d *decimal) Set(text string) error {
	if text == "" || strings.TrimLeft(text, "0123456789") != "" {
		return fmt.Errorf("not a number: %q", text)
	}
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return fmt.Errorf("not a number: %q", text)
	}
	*d = decimal(v)
	return nil
}

func main() {
	var windowSecondsFlag, horizonFlag, rawAPIFlag decimal = 3600, 0, 0
	flag.Var(&windowSecondsFlag, "window-seconds", "window size in seconds (divides one day)")
	flag.Var(&horizonFlag, "reorder-horizon-ns",
		"how far records may arrive out of order (default: the library's, 60 s)")
	windowSeconds := (*uint64)(&windowSecondsFlag)
	horizon := (*uint64)(&horizonFlag)
	tenant := flag.String("tenant", "", "tenant of work no rule attributes (default: unattributed)")
	prices := flag.String("prices", "examples/pricebook.toml", "price book (TOML)")
	flag.Var(&rawAPIFlag, "raw-cupti-api-version",
		"layout of a raw buffer file (0 = 26, CUDA 12.8's); a .gmr has its own")
	rawAPI := (*uint64)(&rawAPIFlag)
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./examples/go [flags] RECORDING")
		flag.PrintDefaults()
	}
	flag.Parse()
	haveHorizon := false
	flag.Visit(func(f *flag.Flag) { haveHorizon = haveHorizon || f.Name == "reorder-horizon-ns" })
	// The ranges the C agent (and the library's configuration) take.
	if flag.NArg() != 1 || *windowSeconds == 0 || *windowSeconds > 86400 || *rawAPI > math.MaxUint32 ||
		len(*tenant) > 128 {
		flag.Usage()
		os.Exit(2)
	}
	var horizonNs *uint64
	if haveHorizon {
		horizonNs = horizon
	}
	if err := run(flag.Arg(0), *windowSeconds, horizonNs, *tenant, *prices, uint32(*rawAPI)); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(path string, windowSeconds uint64, horizon *uint64, tenant, pricesPath string, rawAPI uint32) error {
	// A library built for another ABI would misread our calls: refuse to run.
	if v := C.gm_abi_version(); v != abiVersion {
		return fmt.Errorf("library ABI %d, agent built for %d", uint32(v), abiVersion)
	}
	book, err := os.ReadFile(pricesPath)
	if err != nil {
		return err
	}
	prices := C.CString(string(book))
	defer C.free(unsafe.Pointer(prices))

	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var rec *C.gm_recording
	if err := call("gm_recording_open", func() C.gm_status {
		return C.gm_recording_open(cpath, C.uint32_t(rawAPI), &rec)
	}); err != nil {
		return err
	}
	defer C.gm_recording_free(rec)

	// The buffers' layout is the producer's CUPTI API version: a live agent passes its
	// CUPTI_API_VERSION, a replay the recording's.
	config := map[string]interface{}{
		"cupti_api_version": uint32(C.gm_recording_cupti_api_version(rec)),
		"window_seconds":    windowSeconds,
	}
	if horizon != nil {
		config["reorder_horizon_ns"] = *horizon
	}
	if tenant != "" {
		config["tenant"] = tenant
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return err
	}
	cconfig := C.CString(string(configJSON))
	defer C.free(unsafe.Pointer(cconfig))
	var meter *C.gm_meter
	if err := call("gm_meter_new", func() C.gm_status { return C.gm_meter_new(cconfig, &meter) }); err != nil {
		return err
	}
	defer C.gm_meter_free(meter)

	windowNs := windowSeconds * 1_000_000_000
	var drainedEdge uint64
	// A struct the library fills says how big it is: a later library adds fields at its end.
	var item C.gm_recording_item
	item.struct_size = C.size_t(unsafe.Sizeof(item))
	for {
		if err := call("gm_recording_next", func() C.gm_status { return C.gm_recording_next(rec, &item) }); err != nil {
			return err
		}
		switch item.kind {
		case C.GM_ITEM_END:
			// Shutdown: everything left, open windows included.
			return drain(meter, math.MaxUint64, prices)
		case C.GM_ITEM_DEVICE:
			err = call("gm_meter_register_device", func() C.gm_status {
				return C.gm_meter_register_device(meter, item.device)
			})
		case C.GM_ITEM_BUFFER:
			// CUPTI's buffer-completed callback: hand the valid bytes over, then drain the
			// windows that closed, those ending at or before the watermark's window edge.
			var watermark C.uint64_t
			err = call("gm_meter_ingest_cupti_buffer", func() C.gm_status {
				return C.gm_meter_ingest_cupti_buffer(meter, item.buffer, item.buffer_size)
			})
			if err == nil {
				err = call("gm_meter_watermark_ns", func() C.gm_status { return C.gm_meter_watermark_ns(meter, &watermark) })
			}
			if edge := uint64(watermark) - uint64(watermark)%windowNs; err == nil && edge > drainedEdge {
				err = drain(meter, edge, prices)
				drainedEdge = edge
			}
		case C.GM_ITEM_DROPPED:
			err = call("gm_meter_report_dropped", func() C.gm_status {
				return C.gm_meter_report_dropped(meter, item.device_id, item.dropped)
			})
		case C.GM_ITEM_PROCESS_EXIT:
			err = call("gm_meter_process_exited", func() C.gm_status {
				return C.gm_meter_process_exited(meter, item.pid, item.timestamp_ns)
			})
		}
		if err != nil {
			return err
		}
	}
}

// drain drains the windows that end at or before beforeNs and prints the usage report, then
// its invoice.
func drain(meter *C.gm_meter, beforeNs uint64, prices *C.char) error {
	var usage, invoice *C.char
	if err := call("gm_meter_drain_usage_json", func() C.gm_status {
		return C.gm_meter_drain_usage_json(meter, C.uint64_t(beforeNs), &usage)
	}); err != nil {
		return err
	}
	// Strings the library returns are freed by the library.
	defer C.gm_string_free(usage)
	if err := call("gm_rate_json", func() C.gm_status { return C.gm_rate_json(usage, prices, &invoice) }); err != nil {
		return err
	}
	defer C.gm_string_free(invoice)
	fmt.Println(C.GoString(usage))
	fmt.Println(C.GoString(invoice))
	return nil
}

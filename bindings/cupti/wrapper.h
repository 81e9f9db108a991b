/* bindgen input for crates/cupti-sys (see bindings/cupti/regenerate.sh).
 *
 * What the gpumeter collector needs from CUPTI: the activity API (records, enable/disable,
 * buffer callbacks, GetNextRecord, flush, dropped counts, external correlation, device ids,
 * timestamps), the callback API (subscribe/enable, domains, callback ids of the runtime and
 * driver APIs), cuptiGetVersion and the result codes / strings. The events, metrics and
 * profiler APIs are pulled in by cupti_activity.h but not allowlisted.
 *
 * Instrumented mode (warp_instructions) adds the SASS metrics API (cupti_sass_metrics.h: the
 * header is the same in CUPTI 12.8, 13.0 and 13.4; NVIDIA added it in CUDA 12.4) and the
 * three calls it needs from the profiler headers: cuptiProfilerInitialize,
 * cuptiProfilerDeviceSupported (cupti_profiler_target.h) and cuptiDeviceGetChipName
 * (cupti_target.h). The rest of the profiler API is blocklisted in regenerate.sh.
 *
 * Hardware counters sampled during the run (issue 16, `record --pm-sampling`) add the PM
 * sampling API (cupti_pmsampling.h: set-up, start/stop, decoding the hardware buffer into a
 * counter data image, the samples' times) and the profiler host API (cupti_profiler_host.h:
 * the chip's metrics, the config image PM sampling is given, and evaluating a sample's counter
 * values to metric values). Both exist in CUPTI 12.6 and later. CUPTI 12.8's profiler host
 * header includes C++'s <string> without using it: regenerate.sh puts an empty one first on
 * the include path (bindings/cupti/shim).
 *
 * Per-kernel FLOP counters (issue 17, `record --flops`) add the range profiler API
 * (cupti_range_profiler.h, CUDA 12.6 and later: enable on a context, set-up with auto ranges
 * and kernel replay, start/stop, decoding, the ranges of a counter data image) with the
 * profiler host API above (type CUPTI_PROFILER_TYPE_RANGE_PROFILER), and the two enums of
 * cupti_profiler_target.h it takes (CUpti_ProfilerRange, CUpti_ProfilerReplayMode). */
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <cupti_target.h>
#include <cupti_profiler_target.h>
#include <cupti_sass_metrics.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_range_profiler.h>

/* bindgen input for crates/cupti-sys (see bindings/cupti/regenerate.sh).
 *
 * What the gpumeter collector needs from CUPTI: the activity API (records, enable/disable,
 * buffer callbacks, GetNextRecord, flush, dropped counts, external correlation, device ids,
 * timestamps), the callback API (subscribe/enable, domains, callback ids of the runtime and
 * driver APIs), cuptiGetVersion and the result codes / strings. The events, metrics and
 * profiler APIs are pulled in by cupti_activity.h but not allowlisted. */
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

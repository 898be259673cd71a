// A CPU stand-in for libcupti whose functions succeed, fail or throw on request, so that the
// real Session's lifecycle and error paths run in the tests without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "cupti_loader.h"

namespace hookmagic::fake {

// What the stand-in does; set before Session::start.
struct Script {
    int subscribe_result = 0;         // CUptiResult cuptiSubscribe returns
    int enable_fails_kind = -1;       // an activity kind cuptiActivityEnable refuses (-1: none)
    bool throw_in_next_record = false;  // cuptiActivityGetNextRecord throws (decoding a buffer)
    bool throw_in_timestamp = false;    // cuptiGetTimestamp throws (inside a sync callback)
};

// Counts of what the session asked of the stand-in.
struct Calls {
    int subscribe = 0, unsubscribe = 0, enable = 0, disable = 0, flush = 0, finalize = 0;
};

// A CuptiApi bound to the stand-in, following `script`; resets the counts.
CuptiApi api(const Script& script);
const Calls& calls();

// The entry points the session registered with the stand-in (null until it did).
CUpti_CallbackFunc registered_callback();
CUpti_BuffersCallbackRequestFunc registered_request();
CUpti_BuffersCallbackCompleteFunc registered_complete();

// The runtime callback id the stand-in names cudaStreamSynchronize.
constexpr CUpti_CallbackId kStreamSyncCbid = 7;

}  // namespace hookmagic::fake

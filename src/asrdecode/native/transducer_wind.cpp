// WIND beam search steps of asrdecode.transducer.beam (method="wind") on the native engine, two calls a
// step around the joint (transducer_wind_step.h: the step; the networks stay torch calls in the driver,
// native/transducer_wind.py). The whole search with the networks in C++ is transducer_beam_net.cpp.
#include <string>

#include "transducer_wind_step.h"
#include "guard.h"

using asrd::WindArgs;
using asrd::twind::update_active;
using asrd::twind::wind_pop;
using asrd::twind::WindStep;

extern "C" {

// The joint rows of the next WIND step (see WindArgs); returns their number (counts[0] too).
// guard.h's (negative) code for an exception.
int64_t asrd_wind_pop(const WindArgs* args) {
  const int64_t m = asrd::guard_code<int64_t>([&] { return args->is_double ? wind_pop<double>(*args) : wind_pop<float>(*args); });
  args->counts[0] = m;
  return m;
}

// Which utterances step first (active [B] from the state); returns their number.
int64_t asrd_wind_active(const WindArgs* args) noexcept {
  int64_t n = 0;
  for (int64_t b = 0; b < args->batch; ++b) {
    update_active(*args, b);
    n += args->active[b];
  }
  return n;
}

// One WIND step of every utterance from the joint's logits of asrd_wind_pop's rows. Returns 0, or 1 with
// a message in `err`.
int asrd_wind_step(const WindArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] {
    if (args->is_double) {
      WindStep<double> s(*args);
      return s.run();
    }
    WindStep<float> s(*args);
    return s.run();
  }, err, err_len);
}

}  // extern "C"

// ALSD++ / AES++ beam search steps of asrdecode.transducer.beam on the native engine, one call per step
// (transducer_beam_step.h: the step). The joint and prediction networks stay torch calls in the driver
// (native/transducer_beam.py): the driver hands over the joint's logits for every expanding slot and
// runs the prediction network for the rows this step reports as emitting. The whole search with the
// networks in C++ (one call per batch) is transducer_beam_net.cpp.
#include <string>

#include "transducer_beam_step.h"
#include "guard.h"

namespace {

using asrd::TransducerBeamArgs;

template <typename T>
std::string run_step(const TransducerBeamArgs& a) {
  asrd::tbeam::TransducerBeamStep<T> s(a);
  return s.run();
}

}  // namespace

extern "C" {

// One ALSD++ / AES++ step of every utterance (see TransducerBeamArgs). Returns 0, or 1 with a message in `err`.
int asrd_transducer_beam_step(const TransducerBeamArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] { return args->is_double ? run_step<double>(*args) : run_step<float>(*args); },
                             err, err_len);
}

// The joint rows of the first step (see joint_rows); returns their number.
int64_t asrd_transducer_joint_rows(int64_t batch, int64_t beam, int64_t frames, const int64_t* time,
                                   const uint8_t* active, int64_t* frame_rows, int64_t* rows, int64_t* logit_pos) noexcept {
  return asrd::tbeam::joint_rows(batch, beam, frames, time, active, frame_rows, rows, logit_pos);
}

}  // extern "C"

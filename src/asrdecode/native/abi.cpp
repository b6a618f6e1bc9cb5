// The layout of every struct of abi.h, exported so that a test can check the ctypes mirrors
// (asrdecode/native/abi.py) field by field: asrd_abi_field(i, ...) gives entry i (struct name, field name,
// offset, size; an entry with an empty field name gives the struct's sizeof) and returns 0 past the end.
// The table's rows (abi_layout.inc) and the mirrors are generated from abi.h by abi_gen.py.
#include <cstddef>

#include "abi.h"

namespace {

struct FieldLayout {
  const char* type;
  const char* field;
  int64_t offset;
  int64_t size;
};

#define ASRD_SIZE(T) {#T, "", 0, static_cast<int64_t>(sizeof(asrd::T))}
#define ASRD_FIELD(T, f) {#T, #f, static_cast<int64_t>(offsetof(asrd::T, f)), static_cast<int64_t>(sizeof(asrd::T::f))}

const FieldLayout kLayout[] = {
#include "abi_layout.inc"
};

}  // namespace

extern "C" {

// Entry i of the layout table; returns 1, or 0 when i is past the end (nothing written).
int asrd_abi_field(int64_t i, const char** type, const char** field, int64_t* offset, int64_t* size) noexcept {
  if (i < 0 || i >= static_cast<int64_t>(sizeof(kLayout) / sizeof(kLayout[0]))) return 0;
  *type = kLayout[i].type;
  *field = kLayout[i].field;
  *offset = kLayout[i].offset;
  *size = kLayout[i].size;
  return 1;
}

}  // extern "C"

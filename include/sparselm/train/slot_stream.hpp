#pragma once
// Forwarding header: the slot stream moved to io/slot_stream.hpp (io::slot_stream), which the
// checkpoint writer reads; this path and the name sparselm::slot_stream keep working.

#include "sparselm/io/slot_stream.hpp"

namespace sparselm {
using io::own_slots_of;
using io::slot_stream;
}  // namespace sparselm

// The chaos soak's clients: plays each arrival as its ChaosKind (chaos.h) against a server on
// one Asio thread, open loop, every network operation under a deadline, and returns what each
// client saw, judged. The Beast code is in chaos_client.cpp and chaos_ws.cpp only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/loadgen/chaos.h"
#include "tools/loadgen/request_body.h"

namespace pagedserve::loadgen {

struct ChaosClientOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;  // the `model` field of the requests the chaos kinds build themselves
  std::string ws_path = "/v1/stream";
  double request_timeout_s = 120.0;     // deadline of each network operation
  double idle_deadline_s = 90.0;        // an idle connection fails if still open after this
  int64_t max_body_bytes = 4 << 20;     // the server's --max-body-bytes; oversized bodies exceed it
  int64_t max_cut_after_events = 8;     // mid-stream disconnects and WebSocket cancels: after 1..k
  int64_t misbehaving_max_tokens = 48;  // forced length of the streams that get cut or cancelled
  double slow_read_interval_s = 0.01;   // slow reader: one byte per interval ...
  double slow_read_for_s = 2.0;         // ... for this long, then it reads normally
  int slow_receive_buffer_bytes = 2048;  // slow reader's SO_RCVBUF: a small TCP window
  bool progress = false;                 // a progress line on stderr
};

// Plays arrival i as kinds[i] at arrivals_s[i] seconds; the well-behaved kinds send
// requests[i] (streamed or not), the others build their own body from its prompt. Blocks
// until every client ended; results are in arrival order, record.index = i.
std::vector<ChaosResult> run_chaos(const ChaosClientOptions& options,
                                   const std::vector<ChaosKind>& kinds,
                                   const std::vector<OutgoingRequest>& requests,
                                   const std::vector<double>& arrivals_s);

}  // namespace pagedserve::loadgen

// A simulated KV memory for the block manager tests. Like real K/V, a slot's content depends
// on the whole prefix up to its token (not only the token), so it holds a fingerprint of
// tokens[0..p]: reusing a block cached under the wrong parent shows up as a mismatch. The tests
// apply the BlockCopy lists the manager returns and write computed tokens through block tables,
// then read every sequence back through its table, which catches copy-on-write, swap and
// prefix-cache mistakes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "cache/block_manager.h"

namespace pagedserve::cache::testing {

inline constexpr uint64_t kUnwritten = 0;

// What slot p holds after the K/V of `tokens`[p] was computed: a fingerprint of tokens[0..p].
inline std::vector<uint64_t> kv_contents(std::span<const int32_t> tokens) {
  std::vector<uint64_t> out;
  uint64_t h = 0x84222325cbf29ce4ULL;
  for (int32_t t : tokens) {
    h = (h ^ static_cast<uint32_t>(t)) * 0x100000001b3ULL;
    h ^= h >> 29;
    out.push_back(h | 1);  // never kUnwritten
  }
  return out;
}

struct KvMemorySim {
  KvMemorySim(int num_device_blocks, int num_cpu_blocks, int block_size)
      : block_size(block_size),
        device(num_device_blocks, std::vector<uint64_t>(block_size, kUnwritten)),
        cpu(num_cpu_blocks, std::vector<uint64_t>(block_size, kUnwritten)) {}

  void copy_device(std::span<const BlockCopy> copies) {
    for (const BlockCopy& c : copies) device.at(c.dst) = device.at(c.src);
  }
  void swap_out(std::span<const BlockCopy> copies) {
    for (const BlockCopy& c : copies) cpu.at(c.dst) = device.at(c.src);
  }
  void swap_in(std::span<const BlockCopy> copies) {
    for (const BlockCopy& c : copies) device.at(c.dst) = cpu.at(c.src);
  }
  // The step computing tokens [first, tokens.size()) writes their K/V through the table.
  void write(std::span<const BlockId> table, std::span<const int32_t> tokens, size_t first) {
    const std::vector<uint64_t> contents = kv_contents(tokens);
    for (size_t p = first; p < tokens.size(); ++p) {
      device.at(table[p / block_size]).at(p % block_size) = contents[p];
    }
  }
  std::vector<uint64_t> read(std::span<const BlockId> table, int num_tokens, bool on_cpu) const {
    const auto& mem = on_cpu ? cpu : device;
    std::vector<uint64_t> out;
    for (int p = 0; p < num_tokens; ++p)
      out.push_back(mem.at(table[p / block_size]).at(p % block_size));
    return out;
  }
  std::vector<uint64_t> read(const BlockManager& bm, SeqId seq) const {
    const bool swapped = bm.is_swapped(seq);
    return read(swapped ? bm.cpu_block_table(seq) : bm.block_table(seq), bm.num_tokens(seq),
                swapped);
  }

  int block_size;
  std::vector<std::vector<uint64_t>> device;
  std::vector<std::vector<uint64_t>> cpu;
};

}  // namespace pagedserve::cache::testing

// Per-request randomness for sampling: Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As
// Easy as 1, 2, 3", SC'11), a counter-based generator. A draw is a pure function of (key, counter),
// so a request's stream depends only on its own key and position, never on the batch around it.
// Must not hold state: there is no generator object to share, seed or advance by accident.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace kvasir {

// Counter-stream ids: which use of randomness a draw is for, so future uses (speculative decoding
// acceptance, ...) get their own numbers at the same position without shifting the token draws.
inline constexpr uint32_t kRngStreamToken = 0;

// One Philox4x32 block with 10 rounds. Public so the CUDA twin can be checked against it.
constexpr std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr,
                                                std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers from the paper
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kM0} * ctr[0];
    const uint64_t p1 = uint64_t{kM1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key = {key[0] + kW0, key[1] + kW1};
  }
  return ctr;
}

// Uniform double in [0, 1) with 53 random bits, for draw `position` of stream `stream` under `key`.
// The sampler uses position = the request's number of generated tokens: the "state" advances
// exactly once per generated token, by the token being appended, and a preempted request that is
// recomputed redraws the very same numbers.
constexpr double philox_uniform(uint64_t key, uint64_t position, uint32_t stream) {
  const std::array<uint32_t, 4> r = philox4x32_10(
      {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), stream, 0u},
      {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  const uint64_t bits = (uint64_t{r[1]} << 32 | r[0]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

// splitmix64's finaliser: spreads nearby integers (seeds 0, 1, 2 ...) over the whole key space.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The key a request samples with. A user seed alone decides it (same seed, same tokens, whatever
// the engine seed or batch); without one the engine seed and the request's index (its arrival
// number, unique per engine) do, so unseeded requests differ from each other but a whole run is
// reproducible from the engine seed. For n > 1 the caller passes a distinct seed per child
// (vLLM gives child i seed + i).
constexpr uint64_t rng_key_for_request(std::optional<uint64_t> seed, uint64_t engine_seed,
                                       uint64_t request_index) {
  if (seed.has_value()) return mix64(*seed);
  // A different domain than seeded keys: an unseeded request is not the same as "seed = index".
  return mix64(mix64(engine_seed ^ 0x5EEDF00Dull) ^ request_index);
}

}  // namespace kvasir

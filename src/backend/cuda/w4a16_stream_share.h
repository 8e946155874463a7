// How the W4A16 wgmma GEMM's stream-K kernel (w4a16_wgmma_stream.cu) deals out its work: the
// pairs of 64-column chunks of every tile, U in all, in tile order over G CTAs, CTA c taking pairs
// [c U / G, (c + 1) U / G). Plain constexpr arithmetic, so the kernel (nvcc's relaxed constexpr)
// and the host test (w4a16_stream_share_test.cpp, on every build) run the same code. The launcher
// keeps G <= U (every CTA gets a pair) and U < 2^30 (pair indices stay int).
#pragma once

#include <algorithm>
#include <cstdint>

namespace kvasir::cuda {

// A CTA's piece of one tile: the tile's pairs [p0, p1); `next` the pair after it.
struct W4a16StreamPiece {
  int tile, p0, p1, next;
};

struct W4a16StreamShare {
  int64_t units;  // U: tiles x pairs_per_tile
  int ctas;       // G
  int pairs_per_tile;

  // CTA c's first pair (start(G) = U).
  constexpr int start(int c) const { return static_cast<int>(static_cast<int64_t>(c) * units / ctas); }
  // The CTA whose share holds pair u.
  constexpr int owner(int64_t u) const { return static_cast<int>(((u + 1) * ctas - 1) / units); }
  // The piece from pair u to the end of u's tile or of the share (`end`), whichever comes first.
  constexpr W4a16StreamPiece piece(int u, int end) const {
    const int tile = u / pairs_per_tile, next = std::min(end, (tile + 1) * pairs_per_tile);
    return {tile, u - tile * pairs_per_tile, next - tile * pairs_per_tile, next};
  }
  constexpr bool whole(const W4a16StreamPiece& p) const { return p.p0 == 0 && p.p1 == pairs_per_tile; }
  // The CTAs [first_cta, last_cta] that share a tile not covered whole by one: each writes its
  // partial and takes a ticket; the last of them to arrive sums the partials.
  constexpr int first_cta(int tile) const { return owner(static_cast<int64_t>(tile) * pairs_per_tile); }
  constexpr int last_cta(int tile) const { return owner(static_cast<int64_t>(tile + 1) * pairs_per_tile - 1); }
  // Where CTA c keeps its partial of a shared tile: slot 0 for its first tile, 1 for its last (the
  // tiles between are whole: a CTA shares at most two).
  constexpr int slot(int c, int tile) const { return tile == start(c) / pairs_per_tile ? 0 : 1; }
};

}  // namespace kvasir::cuda

// The stream-K W4A16 GEMM's deal of work (w4a16_stream_share.h), run the way the kernel runs it
// (w4a16_wgmma_stream.cu's loop over each CTA's pieces) for many tile counts, pairs per tile and
// CTA counts: every pair computed by exactly one CTA; a tile either stored whole by one CTA or
// summed from the partials of exactly the CTAs [first_cta, last_cta], each of which wrote it in
// the slot the summing CTA reads, no slot written twice; the ticket count that marks the last
// arrival equal to the number of CTAs that take a ticket.
#include "backend/cuda/w4a16_stream_share.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvasir::cuda {
namespace {

void check_deal(int tiles, int pairs_per_tile, int ctas) {
  SCOPED_TRACE("tiles " + std::to_string(tiles) + ", pairs a tile " + std::to_string(pairs_per_tile) + ", CTAs " +
               std::to_string(ctas));
  const int64_t units = static_cast<int64_t>(tiles) * pairs_per_tile;
  ASSERT_LE(ctas, units);
  const W4a16StreamShare share{units, ctas, pairs_per_tile};
  ASSERT_EQ(share.start(0), 0);
  ASSERT_EQ(share.start(ctas), units);
  std::vector<int> computed_by(static_cast<size_t>(units), -1);
  std::vector<int> stored_whole(static_cast<size_t>(tiles), 0), tickets(static_cast<size_t>(tiles), 0);
  std::map<std::pair<int, int>, int> slot_tile;  // (CTA, slot) -> the tile whose partial it holds
  for (int c = 0; c < ctas; ++c) {
    const int u0 = share.start(c), u1 = share.start(c + 1);
    ASSERT_LT(u0, u1) << "CTA " << c << " has no pair";
    int shared_tiles = 0;
    for (int u = u0; u < u1;) {
      const W4a16StreamPiece piece = share.piece(u, u1);
      ASSERT_EQ(piece.tile * pairs_per_tile + piece.p0, u);
      ASSERT_LT(piece.p0, piece.p1);
      ASSERT_LE(piece.p1, pairs_per_tile);
      ASSERT_GT(piece.next, u);
      for (int q = piece.p0; q < piece.p1; ++q) {
        const size_t pair = static_cast<size_t>(piece.tile) * pairs_per_tile + q;
        ASSERT_EQ(computed_by[pair], -1) << "pair " << pair << " computed twice";
        computed_by[pair] = c;
        ASSERT_EQ(share.owner(static_cast<int64_t>(pair)), c);
      }
      u = piece.next;
      if (share.whole(piece)) {
        ++stored_whole[static_cast<size_t>(piece.tile)];
        continue;
      }
      ++shared_tiles;
      ASSERT_GE(c, share.first_cta(piece.tile));
      ASSERT_LE(c, share.last_cta(piece.tile));
      const auto key = std::make_pair(c, share.slot(c, piece.tile));
      ASSERT_EQ(slot_tile.count(key), 0u) << "CTA " << c << " writes slot " << key.second << " twice";
      slot_tile[key] = piece.tile;
      ++tickets[static_cast<size_t>(piece.tile)];
    }
    EXPECT_LE(shared_tiles, 2) << "CTA " << c;
  }
  for (int64_t u = 0; u < units; ++u) ASSERT_NE(computed_by[static_cast<size_t>(u)], -1) << "pair " << u << " lost";
  for (int t = 0; t < tiles; ++t) {
    SCOPED_TRACE("tile " + std::to_string(t));
    const size_t ti = static_cast<size_t>(t);
    if (stored_whole[ti] > 0) {
      EXPECT_EQ(stored_whole[ti], 1);
      EXPECT_EQ(tickets[ti], 0);
      EXPECT_EQ(share.first_cta(t), share.last_cta(t));
      continue;
    }
    const int lo = share.first_cta(t), hi = share.last_cta(t);
    ASSERT_LT(lo, hi);
    // The kernel's last arrival is the one whose atomicAdd returns hi - lo: every CTA of the range
    // takes exactly one ticket.
    EXPECT_EQ(tickets[ti], hi - lo + 1);
    for (int c = lo; c <= hi; ++c) {
      const auto it = slot_tile.find({c, share.slot(c, t)});
      ASSERT_NE(it, slot_tile.end()) << "CTA " << c << " wrote no partial where the sum reads it";
      EXPECT_EQ(it->second, t) << "CTA " << c;
    }
  }
}

TEST(W4a16StreamShare, EveryPairOnceAndEverySharedTileSummedFromItsCtas) {
  for (int tiles = 1; tiles <= 20; ++tiles) {
    for (int pairs = 1; pairs <= 20; ++pairs) {
      const int units = tiles * pairs;
      for (int ctas = 1; ctas <= units && ctas <= 140; ++ctas) check_deal(tiles, pairs, ctas);
    }
  }
}

// Llama-3.1-8B's batched-decode GEMMs on 132 SMs (H100 / H200): q/k/v, o, gate/up and down at one,
// two and four row tiles; and a GEMM with more tiles than CTAs and one pair a tile.
TEST(W4a16StreamShare, LlamaShapesOnAnHopper) {
  const int row_tiles[] = {1, 2, 4};
  const std::pair<int, int> gemms[] = {{24, 32}, {16, 32}, {112, 32}, {16, 112}};  // column tiles, pairs
  for (int r : row_tiles) {
    for (const auto& [columns, pairs] : gemms) check_deal(columns * r, pairs, 132);
  }
  check_deal(500, 1, 132);
  check_deal(8192, 3, 132);
}

}  // namespace
}  // namespace kvasir::cuda

#include "layers/rope_table.h"

#include <algorithm>
#include <cmath>

namespace kvasir {

RopeTable make_rope_table(double theta, int rotary_dim, const RopeScaling& s,
                          const std::vector<float>* freq_factors) {
  RopeTable t;
  const int half = rotary_dim / 2;
  t.inv_freq.resize(static_cast<size_t>(half));
  // HF computes inv_freq in float32 from an int64 arange: 1 / theta^(2i/d). Match its rounding.
  for (int i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    t.inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), expo);
  }
  if (s.type == RopeScalingType::kLongrope) {
    // transformers: inv_freq = 1 / (ext_factor[i] * theta^(2i/d)), in float32.
    t.long_inv_freq.resize(t.inv_freq.size());
    for (int i = 0; i < half; ++i) {
      const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
      const float base = std::pow(static_cast<float>(theta), expo);
      const size_t u = static_cast<size_t>(i);
      t.inv_freq[u] = 1.0f / (static_cast<float>(s.short_factor[u]) * base);
      t.long_inv_freq[u] = 1.0f / (static_cast<float>(s.long_factor[u]) * base);
    }
    t.long_after = s.original_max_position_embeddings;
    t.attention_factor = static_cast<float>(s.attention_factor);
  } else if (freq_factors != nullptr) {
    for (size_t i = 0; i < t.inv_freq.size() && i < freq_factors->size(); ++i) t.inv_freq[i] /= (*freq_factors)[i];
  } else if (s.type == RopeScalingType::kLinear) {
    for (float& f : t.inv_freq) f = static_cast<float>(f / s.factor);
  } else if (s.type == RopeScalingType::kLlama3) {
    const double old_len = s.original_max_position_embeddings > 0 ? static_cast<double>(s.original_max_position_embeddings) : 8192;
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (float& f : t.inv_freq) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / s.factor + smooth * f);
      }
    }
  } else if (s.type == RopeScalingType::kYarn) {
    const double old_len = s.original_max_position_embeddings > 0 ? static_cast<double>(s.original_max_position_embeddings) : 4096;
    auto correction_dim = [&](double rot) {
      return rotary_dim * std::log(old_len / (rot * 2 * M_PI)) / (2 * std::log(theta));
    };
    // transformers' find_correction_range: rounded out unless truncate is off, then clamped to
    // [0, rotary_dim - 1] (the whole dimension count, though the ramp runs over half of it).
    double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(0.0, low);
    high = std::min(static_cast<double>(rotary_dim - 1), high);
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      const double f = t.inv_freq[static_cast<size_t>(i)];
      t.inv_freq[static_cast<size_t>(i)] = static_cast<float>(f / s.factor * (1 - extrapolation) + f * extrapolation);
    }
    t.attention_factor = static_cast<float>(
        s.attention_factor > 0 ? s.attention_factor : (s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0));
  }
  return t;
}

}  // namespace kvasir

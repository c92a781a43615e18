//! Compaction settings and the trigger (contract §7.4).

use serde::{Deserialize, Serialize};

/// Defaults: enabled, reserve 16,384 tokens, keep the most recent 20,000 tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CompactionSettings {
    /// Whether automatic compaction runs at all.
    pub enabled: bool,
    /// Tokens kept free for the reply and the summary.
    pub reserve_tokens: u64,
    /// Tokens of recent history kept raw.
    pub keep_recent_tokens: u64,
    /// OpenClaw's floor for the reserve (`agents.defaults.compaction.reserveTokensFloor`);
    /// 0 disables it.
    pub reserve_tokens_floor: u64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            reserve_tokens_floor: 20_000,
        }
    }
}

/// The reserve in effect: bumped up to the floor, and — when the context window is known —
/// capped so that neither floor nor reserve can eat the whole prompt budget (at most half the
/// window).
pub fn effective_reserve_tokens(settings: &CompactionSettings, context_window: Option<u64>) -> u64 {
    let mut floor = settings.reserve_tokens_floor;
    let mut reserve = settings.reserve_tokens;
    if let Some(window) = context_window {
        let cap = window / 2;
        floor = floor.min(cap);
        reserve = reserve.min(cap);
    }
    reserve.max(floor)
}

/// The trigger: `contextTokens > contextWindow - reserveTokens` (when enabled).
pub fn should_compact(
    context_tokens: u64,
    context_window: u64,
    settings: &CompactionSettings,
) -> bool {
    settings.enabled
        && context_tokens
            > context_window
                .saturating_sub(effective_reserve_tokens(settings, Some(context_window)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_spec_7_4() {
        let s = CompactionSettings::default();
        assert_eq!(
            (
                s.reserve_tokens,
                s.keep_recent_tokens,
                s.reserve_tokens_floor
            ),
            (16_384, 20_000, 20_000)
        );
    }

    #[test]
    fn reserve_is_bumped_to_floor_and_capped_by_window() {
        let s = CompactionSettings::default();
        assert_eq!(effective_reserve_tokens(&s, None), 20_000);
        assert_eq!(effective_reserve_tokens(&s, Some(200_000)), 20_000);
        // A small window cannot lose more than half of itself to the reserve.
        assert_eq!(effective_reserve_tokens(&s, Some(16_000)), 8_000);
        let no_floor = CompactionSettings {
            reserve_tokens_floor: 0,
            ..s
        };
        assert_eq!(effective_reserve_tokens(&no_floor, Some(200_000)), 16_384);
    }

    #[test]
    fn trigger_is_window_minus_reserve() {
        let s = CompactionSettings::default();
        assert!(!should_compact(180_000, 200_000, &s));
        assert!(should_compact(180_001, 200_000, &s));
        assert!(!should_compact(
            1_000_000,
            200_000,
            &CompactionSettings {
                enabled: false,
                ..s
            }
        ));
    }
}

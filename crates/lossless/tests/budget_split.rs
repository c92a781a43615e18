//! How a small budget is split (issue #30 item 2): summaries, the raw tail and the
//! `<recalled>` block each get their share. Watched live at a 2,500-token budget, the frontier's
//! summaries used to be left out of every turn: the raw tail and the recall block took it all.
//! Here a host runs 160 turns at that budget (assemble with the prompt, afterTurn, background
//! maintenance after the reply, as the runtime does), asking now and then about a fact of the
//! first turn. Once compaction has run, every turn must show summaries, and a question must
//! also get the old fact quoted, all within the budget. Runs on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::parse_summary_header;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

const BUDGET: u64 = 2_500;
const TURNS: usize = 160;
const QUESTION: &str = "What did Marguerite name her greyhound?";

/// Tokens of one assembled context by part: (summaries, recalled block, raw messages).
fn split(messages: &[AgentMessage]) -> (u64, u64, u64) {
    let (mut summaries, mut recalled, mut raw) = (0, 0, 0);
    for m in messages {
        let tokens = clawctx_tokens::message_tokens(m);
        let text = m.plain_text();
        if parse_summary_header(&text).is_some() {
            summaries += tokens;
        } else if is_recalled_block(&text) {
            recalled += tokens;
        } else {
            raw += tokens;
        }
    }
    (summaries, recalled, raw)
}

on_both_backends! {
async fn a_small_budget_shows_summaries_the_tail_and_the_recalled_block(store) {
    let e = store.engine(LosslessConfig::default()).await;
    let mut rng = Lcg(30);
    let mut history: Vec<AgentMessage> = Vec::new();
    // Turns since compaction first put a summary in context, and their summary tokens.
    let (mut after_first, mut summary_sum) = (0u64, 0u64);
    let mut questions_quoting = 0;
    for t in 0..TURNS {
        let ts = 1_700_000_000_000i64 + t as i64 * 60_000;
        let pre = history.len();
        let asks = t > 0 && t % 20 == 0;
        let prompt = match t {
            0 => "My sister Marguerite adopted a greyhound and named him Biscuit.".to_owned(),
            _ if asks => QUESTION.to_owned(),
            _ => {
                let n = 20 + rng.below(60) as usize;
                format!("q{t} {}", words(&mut rng, n))
            }
        };
        history.push(AgentMessage::user(prompt.clone()).with_timestamp(ts));
        let mut p = assemble_params(history.clone(), BUDGET);
        p.prompt = Some(prompt);
        let out = e.assemble(&p, &cx()).await.unwrap();
        let used = clawctx_tokens::messages_tokens(&out.messages);
        assert!(used <= BUDGET, "turn {t}: {used} tokens over the budget of {BUDGET}");
        let (summaries, recalled, raw) = split(&out.messages);
        if summaries > 0 || after_first > 0 {
            assert!(
                summaries > 0,
                "turn {t}: no summary reached the model (recalled {recalled}, raw {raw} tokens)"
            );
            assert!(raw > 0, "turn {t}: no raw tail");
            after_first += 1;
            summary_sum += summaries;
        }
        if asks && after_first > 0 {
            let quoted = out
                .messages
                .iter()
                .any(|m| is_recalled_block(&m.plain_text()) && m.plain_text().contains("Biscuit"));
            assert!(quoted, "turn {t}: the first turn's fact is not recalled");
            questions_quoting += 1;
        }
        let n = 40 + rng.below(80) as usize;
        history.push(
            AgentMessage::assistant(format!("a{t} {}", words(&mut rng, n))).with_timestamp(ts + 1),
        );
        e.after_turn(&after_turn(&history, pre, BUDGET), &cx()).await.unwrap();
        e.maintain(&deferred_maintain(BUDGET), &cx()).await.unwrap();
    }
    assert!(after_first >= TURNS as u64 / 2, "compaction ran late or never: {after_first} turns with summaries");
    assert!(questions_quoting >= 4, "{questions_quoting} questions after the first compaction");
    // Summaries are a real share of the context, not a token's worth: at least a tenth of the
    // budget on average.
    let mean = summary_sum / after_first;
    eprintln!("{}: {after_first} turns with summaries, {mean} summary tokens on average", store.name());
    assert!(mean >= BUDGET / 10, "summaries took {mean} tokens on average of {BUDGET}");
}
}

//! A provider's `Retry-After: 1e20` panicked the turn (`Duration::from_secs_f64`): the gateway
//! answered 500 and `turns_in_flight` never went down (issue #27 item 6). Now the 429 goes back
//! as the provider's failure (502, naming the rate limit), and the gauge is back to 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{start, Opts};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_retry_after_is_a_provider_error_and_the_turn_gauge_goes_back_to_zero() {
    let gw = start(Opts::default()).await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1e20")
                .set_body_json(json!({"error": {"message": "slow down"}})),
        )
        .with_priority(1)
        .mount(&gw.llm.server)
        .await;
    for _ in 0..2 {
        let r = gw
            .http
            .post(gw.at("/v1/chat/completions"))
            .header("x-clawctx-session", "agent:main:throttled")
            .json(&json!({"messages": [{"role": "user", "content": "hello"}]}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap();
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("rate limited"), "{body}");
    }
    // The gauge is decremented when the turn's task ends, right after it answered.
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = gw.get("/metrics").await.text().await.unwrap();
        if metrics.contains("clawctx_gateway_turns_in_flight 0") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        metrics.contains("clawctx_gateway_turns_in_flight 0"),
        "{metrics}"
    );
}

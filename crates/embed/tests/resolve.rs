//! `resolve`: nothing configured is `None`; `CLAWCTX_EMBED_MODEL` as a directory, as a hub id
//! (a mock hub on 127.0.0.1 via `HF_ENDPOINT`, then the cache with the hub gone), and as
//! something unusable, each with an error that says what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;

use clawctx_embed::{resolve, EmbedSpec, ResolveError};

use crate::common::{self, Tiny};

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Sync {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[tokio::test]
async fn nothing_configured_and_nothing_found_is_none() {
    let home = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let env = env_of(&[("HOME", &s(home.path()))]);
    assert!(resolve(None, state.path(), &env).await.unwrap().is_none());
    let off = env_of(&[("HOME", &s(home.path())), ("CLAWCTX_EMBED_MODEL", "off")]);
    assert!(resolve(None, state.path(), &off).await.unwrap().is_none());
}

#[tokio::test]
async fn the_variable_names_a_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("tiny");
    common::write_tiny_model(&dir, &Tiny::default());
    let env = env_of(&[("HOME", &s(root.path())), ("CLAWCTX_EMBED_MODEL", &s(&dir))]);
    let embedder = resolve(None, root.path(), &env)
        .await
        .unwrap()
        .expect("an embedder");
    assert_eq!(embedder.dim(), common::HIDDEN);
    let v = embedder.embed(&["hello world".to_owned()]).await.unwrap();
    assert_eq!(v[0].len(), common::HIDDEN);

    // `"provider": "off"` in the config wins over the variable.
    let off = resolve(Some(&EmbedSpec::Off), root.path(), &env)
        .await
        .unwrap();
    assert!(off.is_none());

    // The default directory is found without any variable.
    let default_dir = root.path().join(clawctx_embed::DEFAULT_MODEL_DIR);
    common::write_tiny_model(&default_dir, &Tiny::default());
    let env = env_of(&[("HOME", &s(root.path()))]);
    let found = resolve(None, root.path(), &env).await.unwrap();
    assert!(found.is_some(), "the fetch script's directory is picked up");
}

#[tokio::test]
async fn unusable_values_are_errors_that_say_what_to_do() {
    let root = tempfile::tempdir().unwrap();
    let home = s(root.path());

    let env = env_of(&[
        ("HOME", &home),
        ("CLAWCTX_EMBED_MODEL", "/nonexistent/model"),
    ]);
    let err = resolve(None, root.path(), &env).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ResolveError::NotFound { .. }), "{msg}");
    assert!(
        msg.contains("CLAWCTX_EMBED_MODEL")
            && msg.contains("/nonexistent/model")
            && msg.contains("fetch-embed-model"),
        "{msg}"
    );

    let file = root.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let env = env_of(&[("HOME", &home), ("CLAWCTX_EMBED_MODEL", &s(&file))]);
    let err = resolve(None, root.path(), &env).await.unwrap_err();
    assert!(err.to_string().contains("is a file"), "{err}");

    let broken = root.path().join("broken");
    common::write_tiny_model(&broken, &Tiny::default());
    std::fs::remove_file(broken.join("tokenizer.json")).unwrap();
    let spec = EmbedSpec::Local { model: s(&broken) };
    let err = resolve(Some(&spec), root.path(), &env_of(&[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ResolveError::Load { source_name, .. } if source_name == "the config"),
        "{err}"
    );
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

/// The hub (feature `hub`): a mock hub on 127.0.0.1 via `HF_ENDPOINT`.
#[cfg(feature = "hub")]
mod hub {
    use super::*;

    use std::time::{Duration, Instant};

    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    /// Serves a model repo the way the hub does for hf-hub: the file list at
    /// `/api/models/<id>/revision/main`, and each file at `/<id>/resolve/main/<file>`, a
    /// `Range: bytes=0-0` probe answered with the etag, commit and size headers.
    struct Hub {
        files: HashMap<String, Vec<u8>>,
    }

    impl Respond for Hub {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            let Some(file) = request.url.path().split("/resolve/main/").nth(1) else {
                return ResponseTemplate::new(404);
            };
            let Some(body) = self.files.get(file) else {
                return ResponseTemplate::new(404);
            };
            let probe = request
                .headers
                .get("range")
                .and_then(|r| r.to_str().ok())
                .is_some_and(|r| r == "bytes=0-0");
            let template = ResponseTemplate::new(206)
                .insert_header("etag", format!("\"etag-{}\"", file.replace('/', "-")))
                .insert_header("x-repo-commit", "0123456789abcdef0123456789abcdef01234567");
            if probe {
                template
                    .insert_header("content-range", format!("bytes 0-0/{}", body.len()))
                    .set_body_bytes(body[..1].to_vec())
            } else {
                template.set_body_bytes(body.clone())
            }
        }
    }

    #[tokio::test]
    async fn a_hub_id_is_fetched_into_the_state_dir_then_found_offline() {
        let source = tempfile::tempdir().unwrap();
        common::write_tiny_model(source.path(), &Tiny::default());
        let mut files = HashMap::new();
        for f in [
            "config.json",
            "tokenizer.json",
            "model.safetensors",
            "modules.json",
            "sentence_bert_config.json",
            "1_Pooling/config.json",
        ] {
            files.insert(f.to_owned(), std::fs::read(source.path().join(f)).unwrap());
        }
        let mut listed: Vec<serde_json::Value> = files
            .keys()
            .map(|f| serde_json::json!({ "rfilename": f }))
            .collect();
        listed.push(serde_json::json!({"rfilename": "onnx/model.onnx"}));
        listed.push(serde_json::json!({"rfilename": "README.md"}));

        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/api/models/test-org/tiny-st/revision/main"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "sha": "0123456789abcdef0123456789abcdef01234567", "siblings": listed
            })))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .respond_with(Hub { files })
            .mount(&server)
            .await;

        let state = tempfile::tempdir().unwrap();
        let uri = server.uri();
        let env = env_of(&[
            ("HOME", &s(state.path())),
            ("CLAWCTX_EMBED_MODEL", "test-org/tiny-st"),
            ("HF_ENDPOINT", &uri),
        ]);
        let embedder = resolve(None, state.path(), &env)
            .await
            .unwrap()
            .expect("fetched");
        assert!(
            embedder.model_id().starts_with("test-org/tiny-st@"),
            "{}",
            embedder.model_id()
        );
        assert_eq!(embedder.dim(), common::HIDDEN);
        let paths: Vec<String> = server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|r| r.url.path().to_owned())
            .collect();
        assert!(
            !paths
                .iter()
                .any(|p| p.contains("onnx") || p.contains("README")),
            "only the files the embedder reads: {paths:?}"
        );
        assert!(state
            .path()
            .join("embed/hub/models--test-org--tiny-st")
            .is_dir());

        // The hub gone: the completed fetch is found in the cache.
        drop(server);
        let again = resolve(None, state.path(), &env)
            .await
            .unwrap()
            .expect("from the cache");
        assert_eq!(again.model_id(), embedder.model_id());
    }

    #[tokio::test]
    async fn an_unreachable_hub_fails_fast_and_says_to_give_a_directory() {
        // A port nothing listens on: connection refused at once.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let state = tempfile::tempdir().unwrap();
        let endpoint = format!("http://127.0.0.1:{port}");
        let env = env_of(&[
            ("HOME", &s(state.path())),
            (
                "CLAWCTX_EMBED_MODEL",
                "sentence-transformers/all-MiniLM-L6-v2",
            ),
            ("HF_ENDPOINT", &endpoint),
        ]);
        let start = Instant::now();
        let err = resolve(None, state.path(), &env).await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(20));
        let msg = err.to_string();
        assert!(
            msg.contains("sentence-transformers/all-MiniLM-L6-v2")
                && msg.contains("hub")
                && msg.contains("fetch-embed-model"),
            "{msg}"
        );
    }
}

#[cfg(not(feature = "hub"))]
#[tokio::test]
async fn without_the_hub_feature_a_hub_id_says_so() {
    let state = tempfile::tempdir().unwrap();
    let env = env_of(&[
        ("HOME", &s(state.path())),
        (
            "CLAWCTX_EMBED_MODEL",
            "sentence-transformers/all-MiniLM-L6-v2",
        ),
    ]);
    let err = resolve(None, state.path(), &env).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("feature `hub`") && msg.contains("fetch-embed-model"),
        "{msg}"
    );
}

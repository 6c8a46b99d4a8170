//! The two questions the kubelet port asks the API server: "who holds this bearer
//! token?" (`POST /apis/authentication.k8s.io/v1/tokenreviews`) and "may this user do
//! this to this node?" (`POST /apis/authorization.k8s.io/v1/subjectaccessreviews`), as
//! upstream's webhook token authenticator and webhook authorizer
//! (`k8s.io/apiserver/plugin/pkg/authenticator/token/webhook`,
//! `.../authorizer/webhook`) send them for the kubelet. Each call is one request with
//! its own timeout; reading the answers (and caching them) is the caller's.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};

use crate::{ApiClient, ApiError};

/// A review's answer as far as it is read: its `status`. The echoed `spec` is skipped
/// unread (and its decoder stays out of the binary).
#[derive(serde::Deserialize)]
struct Answer<S> {
    #[serde(default)]
    status: Option<S>,
}

/// The subject and the node request a `SubjectAccessReview` asks about. The resource
/// is always `nodes` in the core group, version `v1`, cluster-scoped, as upstream's
/// `nodeAuthorizerAttributesGetter` builds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessRequest {
    /// The user's name.
    pub user: String,
    /// The user's UID (empty when it has none).
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// The user's extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
    /// The API verb (`get`, `create` …).
    pub verb: String,
    /// The subresource of `nodes` (`proxy`, `pods`, `stats` …).
    pub subresource: String,
    /// The node's name.
    pub node: String,
}

impl ApiClient {
    /// Asks who holds `token`. The token goes only in the request body (never in a
    /// URL, a log line or an error).
    pub fn review_token(
        &self,
        token: &str,
        timeout: Duration,
    ) -> Result<TokenReviewStatus, ApiError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let body = serde_json::to_vec(&review).map_err(|source| ApiError::Decode {
            what: "create tokenreview",
            url: String::new(),
            source,
        })?;
        let answer: Answer<TokenReviewStatus> = self.post_json(
            "create tokenreview",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body,
            timeout,
        )?;
        Ok(answer.status.unwrap_or_default())
    }

    /// Asks whether `request` is allowed.
    pub fn review_access(
        &self,
        request: &AccessRequest,
        timeout: Duration,
    ) -> Result<SubjectAccessReviewStatus, ApiError> {
        let some_vec = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(request.user.clone()),
                uid: Some(request.uid.clone()).filter(|u| !u.is_empty()),
                groups: some_vec(&request.groups),
                extra: (!request.extra.is_empty()).then(|| request.extra.clone()),
                // The core group and no namespace: Go's `omitempty` leaves both out.
                resource_attributes: Some(ResourceAttributes {
                    group: None,
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(request.subresource.clone()),
                    name: Some(request.node.clone()),
                    namespace: None,
                    verb: Some(request.verb.clone()),
                    ..ResourceAttributes::default()
                }),
                non_resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let body = serde_json::to_vec(&review).map_err(|source| ApiError::Decode {
            what: "create subjectaccessreview",
            url: String::new(),
            source,
        })?;
        let answer: Answer<SubjectAccessReviewStatus> = self.post_json(
            "create subjectaccessreview",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body,
            timeout,
        )?;
        Ok(answer.status.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_spelled_as_the_api_wants() {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some("t".into()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let v = serde_json::to_value(&review).expect("json");
        assert_eq!(v["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(v["kind"], "TokenReview");
        assert_eq!(v["spec"]["token"], "t");
        let sar = SubjectAccessReview::default();
        let v = serde_json::to_value(&sar).expect("json");
        assert_eq!(v["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(v["kind"], "SubjectAccessReview");
    }
}

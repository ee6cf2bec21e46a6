//! The write client's fence: every request that is not a read goes through
//! [`Leadership::fence`], so no write is sent unless this replica leads, and none is still
//! in flight once its lease could have passed to another replica. Being a layer of the one
//! client every write is sent with (binds, evictions, status, Events, claims, groups), no
//! call site can forget it. Reads (lists, gets) pass untouched; the lease itself is written
//! through the watch client, which has no fence.

use std::task::{Context, Poll};

use axum::http::{Method, Request};
use futures::future::BoxFuture;
use kube::client::Body;
use tower::{BoxError, Layer, Service};

use crate::leader::Leadership;

pub struct FenceLayer(pub Leadership);

impl<S> Layer<S> for FenceLayer {
    type Service = Fence<S>;

    fn layer(&self, inner: S) -> Fence<S> {
        Fence {
            inner,
            leadership: self.0.clone(),
        }
    }
}

pub struct Fence<S> {
    inner: S,
    leadership: Leadership,
}

impl<S> Service<Request<Body>> for Fence<S>
where
    S: Service<Request<Body>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let read = matches!(*request.method(), Method::GET | Method::HEAD);
        let answer = self.inner.call(request);
        if read {
            return Box::pin(async move { answer.await.map_err(Into::into) });
        }
        let leadership = self.leadership.clone();
        Box::pin(async move { leadership.fence(answer).await })
    }
}

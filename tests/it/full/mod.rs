//! Tests that need more than Redis: Docker and the idemgate image
//! (`testing`), headless Chromium and chromedriver (`console`,
//! `console_views`, `console_parked`, `console_order`, `csrf`), promtool (`deploy`), Python with the
//! `standardwebhooks` package (`destinations`, `receivers`,
//! `worker_limits`) and `cryptography` (`v1a`, `receivers`), Go and Node (`receivers`, `quickstart`), curl and jq
//! (`quickstart`, `docs_recipes`).

pub(crate) mod console;
pub(crate) mod console_order;
pub(crate) mod console_parked;
pub(crate) mod console_paused;
pub(crate) mod console_views;
pub(crate) mod csrf;
pub(crate) mod deploy;
pub(crate) mod destinations;
pub(crate) mod docs_recipes;
pub(crate) mod quickstart;
pub(crate) mod receivers;
pub(crate) mod testing;
pub(crate) mod v1a;
pub(crate) mod worker_limits;

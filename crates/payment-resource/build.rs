//! `sqlx::migrate!` embeds `migrations/` at compile time; a new or changed migration must
//! rebuild the crate (what sqlx's documentation asks of a build script).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}

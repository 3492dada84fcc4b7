//! The `glint` command-line tool.

fn main() {}

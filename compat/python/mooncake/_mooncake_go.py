"""Marks this `mooncake` package as mooncake-go's (the upstream-compatible
API over libmooncake.so). _mooncake_go_guard looks for this file to tell a
folder that mixes mooncake-go's files with upstream Mooncake's."""

DISTRIBUTION = "mooncake-go"

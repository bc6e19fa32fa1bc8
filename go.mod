module github.com/mooncake-go/mooncake

go 1.26.8

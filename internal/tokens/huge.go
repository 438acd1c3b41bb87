package tokens

// useHugePages lets the large tables ask for huge pages (see hugeSlice).
var useHugePages = true

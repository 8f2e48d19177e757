// Package browser tests the web console (docs/console.md) in a real
// browser: headless Chromium driven by chromedp against a cluster of real
// `shardkit run` processes on loopback (tests/framework), as an operator
// would use it. It needs Chromium (`bash scripts/services.sh
// install-chromium`, or SHARDKIT_CHROMIUM naming a browser binary); without
// it the tests fail, saying how to install it. SHARDKIT_TEST_SCREENSHOTS
// names a directory to save the screenshots in (docs/img/ keeps some).
//
// It imports none of the instance's packages: what it checks is what the
// browser shows.
package browser

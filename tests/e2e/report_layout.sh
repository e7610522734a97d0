#!/usr/bin/env bash
# Checks the layout of a joule report in headless Chromium: in every SVG chart, no text box overlaps another (by
# more than LIMIT square pixels) and every text box lies inside its chart. Prints the problems found; exits 1 if any.
# usage: report_layout.sh REPORT.html [LIMIT]      (needs chromium; writes REPORT.layout.html beside it)
set -uo pipefail
report=$1 limit=${2:-2}
check="${report%.html}.layout.html"
# The report plus a script that measures every <text> after layout and writes what it finds into the DOM.
python3 - "$report" "$check" "$limit" <<'PY' || { echo "cannot write $check"; exit 1; }
import sys
report, check, limit = sys.argv[1], sys.argv[2], sys.argv[3]
script = """<script>
(function () {
  const problems = [];
  document.querySelectorAll('svg').forEach(function (svg, k) {
    const name = 'chart ' + (k + 1) + ' (' + (svg.getAttribute('aria-label') || '') + ')';
    const box = svg.getBoundingClientRect();
    const texts = Array.from(svg.querySelectorAll('text'))
                       .map(function (t) { return [t.firstChild ? t.firstChild.textContent : '', t.getBoundingClientRect()]; })
                       .filter(function (p) { return p[1].width > 0; });
    texts.forEach(function (p) {
      const r = p[1];
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
        problems.push(name + ': "' + p[0] + '" leaves the chart');
    });
    for (let i = 0; i < texts.length; ++i)
      for (let j = i + 1; j < texts.length; ++j) {
        const a = texts[i][1], b = texts[j][1];
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 0 && h > 0 && w * h > LIMIT) problems.push(name + ': "' + texts[i][0] + '" overlaps "' + texts[j][0] + '"');
      }
  });
  const out = document.createElement('pre');
  out.id = 'layout-check';
  out.textContent = 'LAYOUT ' + problems.length + '\\n' + problems.join('\\n');
  document.body.appendChild(out);
})();
</script>""".replace("LIMIT", limit)
html = open(report, encoding="utf-8").read()
if "</body>" not in html:
    sys.exit(report + ": no </body>")
open(check, "w", encoding="utf-8").write(html.replace("</body>", script + "</body>"))
PY
dom=$(HOME="${TMPDIR:-/tmp}" timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1340,2600 \
        --dump-dom "file://$(realpath "$check")" 2>/dev/null) || { echo "chromium could not load $check"; exit 1; }
result=$(python3 -c '
import html, re, sys
m = re.search(r"<pre id=\"layout-check\">(.*?)</pre>", sys.stdin.read(), re.S)
print(html.unescape(m.group(1)) if m else "LAYOUT ? (the check did not run)")' <<<"$dom")
echo "$result"
[[ "$result" == "LAYOUT 0"* ]]

"""Self-contained HTML pages: the boot-verify report (report.html) and the fleet status page.

Each page is one file: CSS inline, plots as data: URIs, no script and nothing fetched from elsewhere.
Every value from a report or from a node is escaped (Jinja2 autoescape), and what could not be read
shows as an explicit "unknown" with its reason, never as a pass.
"""

"""The bay page's style sheet (served as ``/bay.css``: the Content-Security-Policy allows
style sheets from the page's own origin only, no inline style).

For a tablet held at arm's length under hall lighting: dark text on white, 22 px body text,
30 px ids, result buttons at least 72 px high and 140 px wide with 16 px between them (a
gloved finger hits one, not its neighbour), ``OK`` green and set apart from the defect types
(dark red), the banner after a tap in a colour that says stored (green), nothing changed
(blue) or not stored (orange-red). Works from 360 px wide (a phone) upwards; at 800 px (a
tablet upright) three buttons fit a row.
"""

__all__ = ["CSS"]

CSS = """
*{box-sizing:border-box}
html{font-family:system-ui,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;font-size:22px;
 color:#111;background:#f3f4f6;-webkit-text-size-adjust:100%}
body{margin:0}
header{background:#1f2937;color:#fff;padding:14px 20px;position:sticky;top:0;z-index:1}
h1{margin:0;font-size:30px;font-weight:700}
h1 .where{display:inline-block;margin-left:10px;padding:2px 12px;border-radius:8px;
 background:#fbbf24;color:#111}
nav{display:flex;flex-wrap:wrap;gap:10px;margin-top:10px}
nav a{color:#fff;text-decoration:none;padding:10px 16px;border:2px solid #9ca3af;
 border-radius:10px;min-height:52px;display:inline-flex;align-items:center}
nav a[aria-current=page]{background:#fff;color:#111;border-color:#fff;font-weight:700}
main{padding:16px 20px 40px;max-width:900px;margin:0 auto}
.count{font-size:24px;margin:8px 0 16px}
.hint,.empty{color:#374151}
.empty{font-size:26px;padding:40px 0;text-align:center}
.banner{font-size:24px;padding:16px 20px;border-radius:12px;margin:0 0 16px;
 border-left:12px solid}
.banner.good{background:#dcfce7;border-color:#15803d}
.banner.info{background:#dbeafe;border-color:#1d4ed8}
.banner.bad{background:#ffedd5;border-color:#c2410c}
ol.sticks{list-style:none;margin:0;padding:0}
li.stick{background:#fff;border-radius:14px;padding:16px 20px 20px;margin:0 0 18px;
 box-shadow:0 1px 3px rgba(0,0,0,.25);border-left:12px solid #b91c1c}
li.stick.inspect{border-left-color:#1d4ed8}
.top{display:flex;justify-content:space-between;align-items:baseline}
.kind{font-weight:700;text-transform:uppercase;letter-spacing:.04em;color:#b91c1c}
li.inspect .kind{color:#1d4ed8}
.time{font-size:26px;font-weight:600}
dl.ids{display:flex;flex-wrap:wrap;gap:8px 36px;margin:10px 0 6px}
dl.ids div{min-width:120px}
dt{font-size:18px;color:#4b5563}
dd{margin:0;font-size:30px;font-weight:700;word-break:break-all}
.reason{margin:4px 0 14px;color:#374151;font-size:20px}
.buttons{display:flex;flex-wrap:wrap;gap:16px}
button,.go{font:inherit;font-size:26px;font-weight:700;min-height:72px;min-width:140px;
 padding:12px 22px;border-radius:12px;border:3px solid transparent;cursor:pointer;
 touch-action:manipulation}
button.ok{background:#15803d;color:#fff;margin-right:32px}
button.defect{background:#fff;color:#991b1b;border-color:#991b1b}
button:active{filter:brightness(.85)}
.go{background:#1f2937;color:#fff;text-decoration:none;display:inline-flex;align-items:center;
 justify-content:center}
button.quiet{background:transparent;color:#374151;border-color:#9ca3af;font-size:20px;
 min-height:56px}
footer{padding:10px 20px 40px;max-width:900px;margin:0 auto}
.login form{display:flex;flex-direction:column;gap:16px;max-width:560px}
.login input{font:inherit;font-size:26px;padding:14px;border:3px solid #6b7280;
 border-radius:12px;min-height:72px}
ul.stations{list-style:none;padding:0;display:flex;flex-direction:column;gap:16px}
a.station{display:flex;justify-content:space-between;align-items:center;min-height:88px;
 padding:16px 24px;background:#fff;border-radius:14px;color:#111;text-decoration:none;
 font-size:28px;box-shadow:0 1px 3px rgba(0,0,0,.25)}
"""

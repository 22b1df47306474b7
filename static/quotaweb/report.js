// Draws the server-built figures of a page without live updates (the usage report): each
// [data-static-figure] names the json_script holding its Plotly figure.  As in live.js,
// the container gets the figure's height so that a window resize keeps it.
function drawStaticFigures() {
  for (const div of document.querySelectorAll("[data-static-figure]")) {
    const figure = JSON.parse(document.getElementById(div.dataset.staticFigure).textContent);
    if (figure.layout.height) div.style.height = `${figure.layout.height}px`;
    Plotly.newPlot(div, figure.data, figure.layout, figure.config);
  }
}

if (window.Plotly) drawStaticFigures();
else window.addEventListener("load", drawStaticFigures, { once: true });

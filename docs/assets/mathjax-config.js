// MathJax 3 settings for every page; loaded just before vendor/mathjax/tex-chtml-full.js.
(function () {
  "use strict";
  // Chapter pages are notebooks: their markdown cells write $...$ as Jupyter does. Markdown pages
  // get \(...\) spans from pymdownx.arithmatex, so a lone "$" in prose stays a dollar sign there.
  var notebook = document.querySelector(".jupyter-wrapper") !== null;
  window.MathJax = {
    tex: {
      inlineMath: notebook ? [["$", "$"], ["\\(", "\\)"]] : [["\\(", "\\)"]],
      displayMath: notebook ? [["$$", "$$"], ["\\[", "\\]"]] : [["\\[", "\\]"]],
      processEscapes: true,
      processEnvironments: true,
    },
    options: notebook
      ? {
          // Typeset markdown cells; code outputs (printed text, HTML, widgets) keep their "$".
          ignoreHtmlClass: "jp-OutputArea|md-header|md-sidebar|md-footer|md-search",
          processHtmlClass: "jp-RenderedMarkdown|arithmatex",
        }
      : { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
    startup: {
      ready: function () {
        MathJax.startup.defaultReady();
        // ipywidgets typeset widget labels through the MathJax 2 call MathJax.Hub.Queue(["Typeset",
        // MathJax.Hub, element]); route it to MathJax 3 so saved widgets render without errors.
        MathJax.Hub = {
          Queue: function () {
            Array.prototype.forEach.call(arguments, function (job) {
              if (Array.isArray(job) && job[0] === "Typeset") {
                MathJax.typesetPromise(job[2] ? [job[2]] : undefined);
              }
            });
          },
        };
      },
    },
  };
})();

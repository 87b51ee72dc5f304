(function () {
  var jupyter = !!document.querySelector('.jp-LabShell, .jp-Notebook, #notebook-container');
  var mj = window.MathJax;
  // a static page: load MathJax unless the page has one, loaded or still to come (Sphinx defers its own)
  if (!jupyter) { if (!(mj && mj.version) && !document.querySelector('script[src*="mathjax" i]'))
    window.__pvLoadMathJax = true; return; }
  if (window.PolyvoxMathJax) return;
  var me = document.currentScript, text = me ? me.textContent : '';
  var begin = text.lastIndexOf('/*PV-MJ-' + 'BEGIN*/'), end = text.lastIndexOf('/*PV-MJ-' + 'END*/');
  if (begin < 0 || end < begin) return;
  var frame = document.createElement('iframe');
  frame.style.display = 'none'; frame.setAttribute('aria-hidden', 'true'); frame.title = 'MathJax';
  document.body.appendChild(frame);
  var s = frame.contentDocument.createElement('script');
  s.textContent = 'window.MathJax = ' + __PV_PRIVATE__ + ';\n' + text.slice(begin, end);
  frame.contentDocument.head.appendChild(s);
  window.PolyvoxMathJax = frame.contentWindow.MathJax;
})();
if (window.__pvLoadMathJax) { delete window.__pvLoadMathJax;
window.MathJax = __PV_CONFIG__;
/*PV-MJ-BEGIN*/
__PV_MATHJAX__
/*PV-MJ-END*/
}

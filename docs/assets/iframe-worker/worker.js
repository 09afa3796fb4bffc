/* refattn book: a stand-in for Web Workers on pages opened from disk.
 *
 * Chromium refuses `new Worker(url)` for a file:// page, and Material's search
 * runs its index in a worker. On file:// this script replaces `window.Worker`
 * with `PageWorker`: the worker's script runs in a hidden same-origin iframe,
 * whose `postMessage` talks to this page and whose `importScripts` loads
 * scripts one after another. Over http(s) nothing is replaced.
 *
 * mkdocs.yml names this file in `extra.polyfills`; Material's offline plugin
 * adds a network shim unless a polyfill's path contains "iframe-worker",
 * hence this folder's name.
 */
"use strict";
(function () {
  // Runs inside the iframe (serialised into it below): the worker's globals.
  function workerPrelude() {
    var parentWindow = window.parent;
    window.postMessage = function (data) { parentWindow.postMessage(data, "*"); };
    window.importScripts = function () {
      var urls = Array.prototype.slice.call(arguments);
      return urls.reduce(function (done, url) {
        return done.then(function () {
          return new Promise(function (resolve, reject) {
            var tag = document.createElement("script");
            tag.src = url;
            tag.onload = resolve;
            tag.onerror = reject;
            document.body.appendChild(tag);
          });
        });
      }, Promise.resolve());
    };
  }

  class PageWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this.frame = document.createElement("iframe");
      this.frame.hidden = true;
      document.body.appendChild(this.frame);
      var inner = this.frame.contentWindow;
      this.relay = this.relay.bind(this);
      window.addEventListener("message", this.relay);
      inner.document.open();
      inner.document.write("<!doctype html><html><body><script>(" + workerPrelude.toString() + ")();<\/script>" +
                           "<script src=\"" + String(url) + "\"><\/script></body></html>");
      inner.document.close();
      // after close(): open() clears the listeners a window had before it
      this.ready = new Promise(function (resolve) { inner.addEventListener("load", resolve); });
    }

    // A message the iframe posted to this page: hand it to the worker's listeners.
    relay(event) {
      if (!this.frame || event.source !== this.frame.contentWindow) return;
      var message = new MessageEvent("message", { data: event.data });
      this.dispatchEvent(message);
      if (typeof this.onmessage === "function") this.onmessage(message);
    }

    // A message for the worker: delivered to the iframe's own "message" listeners.
    postMessage(data) {
      var frame = this.frame;
      this.ready.then(function () {
        if (frame && frame.contentWindow) {
          frame.contentWindow.dispatchEvent(new MessageEvent("message", { data: structuredClone(data) }));
        }
      });
    }

    terminate() {
      window.removeEventListener("message", this.relay);
      if (this.frame) this.frame.remove();
      this.frame = null;
    }
  }

  if (location.protocol === "file:") window.Worker = PageWorker;
})();

/* Exact-action console: small progressive enhancements. Every page works without this file. */
(function () {
  "use strict";

  /* Count down every [data-expires-at] once a second ("4 min 10 s"), as the server renders it. */
  function duration(seconds) {
    seconds = Math.max(Math.floor(seconds), 0);
    var days = Math.floor(seconds / 86400), rest = seconds % 86400;
    var hours = Math.floor(rest / 3600); rest %= 3600;
    var minutes = Math.floor(rest / 60), secs = rest % 60;
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    if (days) { return days + " d " + hours + " h"; }
    if (hours) { return hours + " h " + pad(minutes) + " min"; }
    if (minutes) { return minutes + " min " + pad(secs) + " s"; }
    return secs + " s";
  }

  function tick() {
    var nodes = document.querySelectorAll("[data-expires-at]");
    for (var i = 0; i < nodes.length; i++) {
      var left = (Date.parse(nodes[i].getAttribute("data-expires-at")) - Date.now()) / 1000;
      if (isNaN(left)) { continue; }
      nodes[i].textContent = left > 0 ? duration(left) : "expired";
    }
    closeLapsed();
  }

  /* A decision form whose window has closed: its buttons disable and say "expired" (the
     server refuses a late decision anyway). */
  function closeLapsed() {
    var forms = document.querySelectorAll("form[data-closes-at]");
    for (var i = 0; i < forms.length; i++) {
      var closes = Date.parse(forms[i].getAttribute("data-closes-at"));
      if (isNaN(closes) || closes > Date.now()) { continue; }
      var buttons = forms[i].querySelectorAll("button[type=submit]");
      for (var j = 0; j < buttons.length; j++) {
        if (buttons[j].disabled) { continue; }
        buttons[j].disabled = true;
        buttons[j].textContent = buttons[j].textContent + " (expired)";
        buttons[j].setAttribute("aria-disabled", "true");
      }
      forms[i].classList.add("lapsed");
    }
  }

  /* Queue keys: j / k move between rows, / jumps to the filters. Never while typing. */
  function typing(target) {
    return target && (target.isContentEditable ||
      /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  function onKey(event) {
    if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey ||
        typing(event.target)) { return; }
    if (event.key === "/") {
      var filter = document.querySelector(".filters select, .filters input");
      if (filter) { event.preventDefault(); filter.focus(); }
      return;
    }
    if (event.key !== "j" && event.key !== "k") { return; }
    var links = Array.prototype.slice.call(document.querySelectorAll("a.row-link"));
    if (!links.length) { return; }
    var index = links.indexOf(document.activeElement);
    if (event.key === "j") { index = index < 0 ? 0 : Math.min(index + 1, links.length - 1); }
    else { index = index < 0 ? 0 : Math.max(index - 1, 0); }
    event.preventDefault();
    links[index].focus();
  }

  /* A risky action asks first: a submit button's (or its form's) data-confirm is the question,
     and cancelling it sends nothing. The server decides alone; this only guards the click. */
  function onSubmit(event) {
    var button = event.submitter, form = event.target;
    var question = (button && button.hasAttribute("data-pause-tenant") &&
                    pauseQuestion(form, button.getAttribute("data-pause-tenant"))) ||
      (button && button.getAttribute("data-confirm")) ||
      (form && form.getAttribute && form.getAttribute("data-confirm"));
    if (question && !window.confirm(question)) { event.preventDefault(); }
  }

  /* The pause form's question names what it pauses, as chosen: a contract, an agent, both, or
     (neither chosen) everything in the tenant. */
  function chosen(form, name) {
    var field = form.elements[name];
    if (!field || !field.value || field.selectedIndex < 0) { return ""; }
    return field.options[field.selectedIndex].text;
  }

  function pauseQuestion(form, tenant) {
    var contract = chosen(form, "operation"), agent = chosen(form, "agent"), scope;
    if (contract && agent) { scope = "the contract " + contract + " for the agent " + agent; }
    else if (contract) { scope = "the contract " + contract + ", for every agent"; }
    else if (agent) { scope = "the agent " + agent + ", every contract"; }
    else { scope = "everything in " + tenant + ": every contract and every agent"; }
    return "Pause " + scope + "? From now on no claim and no attempt starts there until an " +
      "admin resumes it.";
  }

  /* Each <time data-local-time> holds a moment in UTC; the reader's local time goes before
     it ("2026-12-03 15:57:18 GMT+1"), and the UTC stays beside it. A reader whose local time
     is UTC reads it once. */
  function localTimes() {
    var nodes = document.querySelectorAll("time[data-local-time]");
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i], moment = new Date(node.getAttribute("datetime"));
      if (isNaN(moment.getTime()) || moment.getTimezoneOffset() === 0 ||
          node.hasAttribute("data-local-shown")) { continue; }
      var zone = "";
      try {
        var parts = new Intl.DateTimeFormat(undefined, {timeZoneName: "short"}).formatToParts(moment);
        for (var j = 0; j < parts.length; j++) {
          if (parts[j].type === "timeZoneName") { zone = " " + parts[j].value; }
        }
      } catch (ignored) { zone = ""; }
      var local = document.createElement("span");
      local.className = "local-time";
      local.textContent = moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" +
        pad(moment.getDate()) + " " + pad(moment.getHours()) + ":" + pad(moment.getMinutes()) +
        ":" + pad(moment.getSeconds()) + zone;
      node.parentNode.insertBefore(local, node);
      node.parentNode.insertBefore(document.createTextNode(" "), node);
      node.setAttribute("data-local-shown", "");
    }
  }

  document.addEventListener("submit", onSubmit);
  document.addEventListener("DOMContentLoaded", localTimes);
  document.addEventListener("htmx:afterSettle", localTimes);
  document.addEventListener("keydown", onKey);
  document.addEventListener("DOMContentLoaded", tick);
  window.setInterval(tick, 1000);
})();

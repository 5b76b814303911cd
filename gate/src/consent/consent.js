// The consent page's check (docs/gate.md#the-consent-page). Vigil's SDK scores this page while
// the person reads it: it opens its collect session with the one-time ticket the server rendered
// into the page, and counts the person's input on the user code field and the Approve button,
// which the page marks for it. Approve is enabled once a code of the right form is typed.
// Pressing Approve or Deny asks the SDK for the page's handoff and posts it with the form, and
// the server opens it and reads Vigil's decision about this browser. A form posted without it is
// refused, so a decision needs a browser session Vigil has scored.
(function () {
  'use strict';
  var form = document.querySelector('form.consent');
  var status = document.getElementById('check-status');
  if (!form || !status) return;
  var say = function (text) { status.textContent = text; };
  var code = form.elements.user_code;
  var approve = form.querySelector('button.approve');
  // The user code's alphabet: twenty consonants; dashes and spaces do not matter.
  var CODE = /^[BCDFGHJKLMNPQRSTVWXZ]{8}$/;
  var typed = function () { return (code.value || '').replace(/[\s\u2010-\u2015-]/g, '').toUpperCase(); };
  var follow = function () { approve.disabled = !CODE.test(typed()); };
  if (code && approve) {
    code.addEventListener('input', follow);
    follow();
  }
  if (!window.Vigil) {
    say('The check could not load. Reload the page to try again.');
    return;
  }
  var agent = window.Vigil.load({
    key: form.dataset.key,
    endpoint: window.location.origin,
    consentTicket: form.dataset.ticket,
  });
  agent.catch(function () { say('The check could not start. Reload the page to try again.'); });
  var busy = false;
  form.addEventListener('submit', function (event) {
    // The second pass, with the handoff in the form: the browser posts it.
    if (form.elements.handoff.value) return;
    event.preventDefault();
    if (busy) return;
    busy = true;
    var button = event.submitter;
    say('Checking this browser…');
    agent
      .then(function (a) { return a.result(); })
      .then(function (result) {
        form.elements.handoff.value = result.handoff;
        if (button && form.requestSubmit) form.requestSubmit(button);
        else form.submit();
      })
      .catch(function () {
        busy = false;
        say('The check failed. Reload the page and decide again.');
      });
  });
})();
